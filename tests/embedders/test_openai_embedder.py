"""OpenAIEmbedder against a real HTTP server speaking the embeddings API."""

from __future__ import annotations

import asyncio
import email.utils
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from memsvc import EmbeddingError, MemoryService, OpenAIEmbedder, Scope, Settings, ValidationError
from memsvc.openai_compat import retry_after
from memsvc.sync import SyncMemoryService
from tests.embedders.fake_openai import FakeEmbeddingsServer, Reply, serving


@pytest.fixture
def server() -> Iterator[FakeEmbeddingsServer]:
    with serving(dim=8) as running:
        yield running


def embedder(server: FakeEmbeddingsServer, **options: Any) -> OpenAIEmbedder:
    options = {"api_key": "sk-test-secret", "backoff_s": 0.01, **options}
    return OpenAIEmbedder("test-embed", base_url=server.base_url, **options)


async def test_returns_the_servers_vectors_in_input_order(server: FakeEmbeddingsServer) -> None:
    texts = ["alpha beta", "gamma", "delta epsilon zeta"]
    async with embedder(server) as openai:
        vectors = await openai(texts)
    assert [v.dtype for v in vectors] == [np.float32] * 3
    for text, vector in zip(texts, vectors, strict=True):
        np.testing.assert_allclose(vector, server.vector(text), rtol=1e-6)
    [request] = server.requests
    assert request.path == "/v1/embeddings"
    assert request.body == {"model": "test-embed", "input": texts, "encoding_format": "float"}


async def test_sends_the_api_key_as_a_bearer_token(
    server: FakeEmbeddingsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    await embedder(server)(["x"])
    assert server.requests[-1].headers["authorization"] == "Bearer sk-test-secret"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    await OpenAIEmbedder("m", base_url=server.base_url)(["x"])
    assert server.requests[-1].headers["authorization"] == "Bearer sk-from-env"
    monkeypatch.delenv("OPENAI_API_KEY")
    await OpenAIEmbedder("m", base_url=server.base_url)(["x"])  # a local server needs none
    assert "authorization" not in server.requests[-1].headers
    assert "sk-test-secret" not in repr(embedder(server))


async def test_splits_texts_into_batches(server: FakeEmbeddingsServer) -> None:
    texts = [f"text number {i}" for i in range(7)]
    vectors = await embedder(server, batch_size=3)(texts)
    assert [r.body["input"] for r in server.requests] == [texts[0:3], texts[3:6], texts[6:7]]
    for text, vector in zip(texts, vectors, strict=True):
        np.testing.assert_allclose(vector, server.vector(text), rtol=1e-6)


async def test_puts_answers_given_out_of_order_back_in_order(
    server: FakeEmbeddingsServer,
) -> None:
    def reverse(answer: dict[str, Any]) -> dict[str, Any]:
        return {**answer, "data": answer["data"][::-1]}

    server.then(Reply(transform=reverse))
    vectors = await embedder(server)(["one", "two", "three"])
    for text, vector in zip(["one", "two", "three"], vectors, strict=True):
        np.testing.assert_allclose(vector, server.vector(text), rtol=1e-6)


async def test_asks_for_dimensions_and_checks_them(server: FakeEmbeddingsServer) -> None:
    await embedder(server, dimensions=8)(["x"])
    assert server.requests[-1].body["dimensions"] == 8
    with pytest.raises(EmbeddingError, match="returned 8 dimensions, asked for 4"):
        await embedder(server, dimensions=4)(["x"])


async def test_retries_a_rate_limit_after_the_wait_the_server_asks_for(
    server: FakeEmbeddingsServer,
) -> None:
    server.then(Reply(status=429, headers={"Retry-After": "0.3"}))
    started = time.monotonic()
    vectors = await embedder(server, backoff_s=0.001)(["x"])
    assert time.monotonic() - started >= 0.3
    assert len(server.requests) == 2
    np.testing.assert_allclose(vectors[0], server.vector("x"), rtol=1e-6)


async def test_retries_server_errors_with_backoff(server: FakeEmbeddingsServer) -> None:
    server.then(Reply(status=503), Reply(status=500), Reply(status=502))
    vectors = await embedder(server, max_retries=3)(["x"])
    assert len(server.requests) == 4
    np.testing.assert_allclose(vectors[0], server.vector("x"), rtol=1e-6)


async def test_gives_up_after_max_retries(server: FakeEmbeddingsServer) -> None:
    server.then(*[Reply(status=503)] * 5)
    with pytest.raises(EmbeddingError, match="HTTP 503") as caught:
        await embedder(server, max_retries=2)(["x"])
    assert caught.value.status == 503 and caught.value.retryable
    assert len(server.requests) == 3


async def test_a_wait_longer_than_max_backoff_fails_at_once(server: FakeEmbeddingsServer) -> None:
    server.then(Reply(status=429, headers={"Retry-After": "120"}))
    started = time.monotonic()
    with pytest.raises(EmbeddingError, match="retry after 120s") as caught:
        await embedder(server, max_backoff_s=1.0)(["x"])
    # Not the 120 s asked for (a bound far from the request's own time, which
    # a loaded CI machine stretched past a second); one request: no retry.
    assert time.monotonic() - started < 30.0
    assert caught.value.status == 429 and caught.value.retryable
    assert len(server.requests) == 1


async def test_client_errors_are_not_retried(server: FakeEmbeddingsServer) -> None:
    error = {"error": {"message": "input is too long for this model", "type": "invalid"}}
    server.then(Reply(status=400, body=json.dumps(error).encode()))
    with pytest.raises(EmbeddingError, match="HTTP 400: input is too long") as caught:
        await embedder(server)(["x"])
    assert caught.value.status == 400 and not caught.value.retryable
    assert len(server.requests) == 1


async def test_not_implemented_is_not_retried(server: FakeEmbeddingsServer) -> None:
    # 501 is the one 5xx that calling again cannot cure.
    server.then(Reply(status=501))
    with pytest.raises(EmbeddingError, match="HTTP 501") as caught:
        await embedder(server)(["x"])
    assert caught.value.status == 501 and not caught.value.retryable
    assert len(server.requests) == 1


async def test_a_rejected_key_says_so_without_showing_it(server: FakeEmbeddingsServer) -> None:
    server.then(Reply(status=401, body=b'{"error": {"message": "Incorrect API key"}}'))
    with pytest.raises(EmbeddingError, match="HTTP 401: check the API key") as caught:
        await embedder(server)(["x"])
    assert "sk-test-secret" not in str(caught.value)


async def test_a_slow_server_times_out_and_is_retried(server: FakeEmbeddingsServer) -> None:
    server.then(Reply(delay_s=2.0), Reply(delay_s=2.0))
    started = time.monotonic()
    with pytest.raises(EmbeddingError, match=r"did not answer within 0.2s") as caught:
        await embedder(server, timeout_s=0.2, max_retries=1)(["x"])
    assert time.monotonic() - started < 1.5
    assert isinstance(caught.value.__cause__, httpx.TimeoutException)
    assert len(server.requests) == 2
    server.then(Reply(delay_s=2.0))
    vectors = await embedder(server, timeout_s=0.5, max_retries=1)(["y"])  # second try answers
    np.testing.assert_allclose(vectors[0], server.vector("y"), rtol=1e-6)


async def test_an_unreachable_server_is_an_embedding_error() -> None:
    with socket.socket() as probe:  # a port nobody listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    with pytest.raises(EmbeddingError, match="could not reach") as caught:
        await OpenAIEmbedder("m", base_url=url, max_retries=1, backoff_s=0.01)(["x"])
    assert caught.value.retryable
    assert isinstance(caught.value.__cause__, httpx.HTTPError)


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (Reply(body=b"<html>bad gateway</html>"), "not JSON"),
        (Reply(body=b'{"object": "list"}'), "without a 'data' list"),
        (Reply(transform=lambda a: {**a, "data": a["data"][:1]}), "returned 1 embeddings for 2"),
        (
            Reply(transform=lambda a: {**a, "data": [a["data"][0], a["data"][0]]}),
            "returned index 0 twice",
        ),
        (
            Reply(
                transform=lambda a: {
                    **a,
                    "data": [a["data"][0], {**a["data"][1], "embedding": [1.0, 2.0]}],
                }
            ),
            "vectors of different lengths",
        ),
        (
            Reply(
                transform=lambda a: {**a, "data": [{**d, "embedding": "abc"} for d in a["data"]]}
            ),
            "no embedding for input 0",
        ),
        (
            Reply(
                transform=lambda a: {**a, "data": [{**d, "embedding": ["a"]} for d in a["data"]]}
            ),
            "non-numeric embedding",
        ),
        (
            Reply(transform=lambda a: {**a, "data": [{**d, "index": 7} for d in a["data"]]}),
            "bad index 7",
        ),
    ],
)
async def test_bad_answers_are_embedding_errors(
    server: FakeEmbeddingsServer, reply: Reply, message: str
) -> None:
    server.then(reply)
    with pytest.raises(EmbeddingError, match=message) as caught:
        await embedder(server)(["first text", "second text"])
    assert not caught.value.retryable
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"model": ""}, "model"),
        ({"base_url": "localhost:8000/v1"}, "base_url"),
        ({"base_url": ""}, "base_url"),
        ({"base_url": "http://127.0.0.1:port/v1"}, "base_url"),
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": 2.5}, "batch_size"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"timeout_s": float("inf")}, "timeout_s"),
        ({"dimensions": -1}, "dimensions"),
        ({"max_retries": -1}, "max_retries"),
    ],
)
def test_bad_options_are_validation_errors(options: dict[str, Any], field: str) -> None:
    arguments: dict[str, Any] = {"model": "m", "base_url": "http://127.0.0.1:1/v1", **options}
    with pytest.raises(ValidationError) as caught:
        OpenAIEmbedder(arguments.pop("model"), **arguments)
    assert caught.value.field == field


async def test_a_service_stores_and_searches_with_it(settings: Settings, scope: Scope) -> None:
    with serving(dim=settings.embedding_dim) as server:
        openai = OpenAIEmbedder("test-embed", base_url=server.base_url, api_key="k")
        async with openai, MemoryService.open(settings, embedder=openai) as service:
            stored = await service.memories.add(scope, "the deploy key rotates on mondays")
            await service.memories.add(scope, "lunch is at noon")
            hits = await service.memories.search(scope, "when does the deploy key rotate", k=1)
        assert hits[0].memory.id == stored.id
        np.testing.assert_allclose(
            stored.embedding, server.vector("the deploy key rotates on mondays"), rtol=1e-6
        )


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({}, None),
        ({"retry-after": "2"}, 2.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "-3"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "<a date 60 s from now>"}, 60.0),
    ],
)
def test_reads_the_wait_a_server_asks_for(headers: dict[str, str], seconds: float | None) -> None:
    if headers.get("retry-after", "").startswith("<a date"):
        headers = {"retry-after": email.utils.formatdate(time.time() + 60, usegmt=True)}
    waited = retry_after(headers)
    if seconds is None:
        assert waited is None
    else:
        assert waited == pytest.approx(seconds, abs=1.5)


def test_works_from_the_blocking_client_and_then_from_another_loop(
    settings: Settings, scope: Scope
) -> None:
    # The blocking client runs its own event loop: the embedder's HTTP client
    # must follow whichever loop calls it.
    with serving(dim=settings.embedding_dim) as server:
        openai = OpenAIEmbedder("test-embed", base_url=server.base_url, api_key="k")
        with SyncMemoryService.open(settings, embedder=openai) as service:
            stored = service.memories.add(scope, "blocking callers store text too")
            hits = service.memories.search(scope, "blocking callers", k=1)
        assert hits[0].memory.id == stored.id
        [vector] = asyncio.run(openai(["and from a fresh loop"]))
        np.testing.assert_allclose(vector, server.vector("and from a fresh loop"), rtol=1e-6)
        assert len(server.requests) == 3
