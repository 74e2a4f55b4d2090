"""The OpenAI chat extractor and summarizer against a real chat completions server."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from memsvc import ExtractionError, OpenAIChatExtractor, OpenAIChatSummarizer, ValidationError
from memsvc.extraction import Candidate, ExtractionRequest, Fact, Message, SummaryMember
from memsvc.extraction.prompts import prompt
from tests.extraction.fake_chat import (
    FakeChatServer,
    Reply,
    add,
    facts,
    operations,
    serving,
)

SECRET = "sk-test-secret-never-shown"
MESSAGES = [Message("u1", "user", "I moved to Berlin. My daughter is Eva.")]


@pytest.fixture
def server() -> Iterator[FakeChatServer]:
    with serving() as running:
        yield running


def extractor(server: FakeChatServer, **options: Any) -> OpenAIChatExtractor:
    return OpenAIChatExtractor(
        server.base_url, "test-chat", SECRET, **{"backoff_s": 0.01, **options}
    )


def request() -> ExtractionRequest:
    return ExtractionRequest(
        messages=tuple(MESSAGES),
        facts=(Fact("The user lives in Berlin.", ("m1",)),),
        candidates=(Candidate("m1", "The user lives in Paris.", datetime(2024, 3, 1, tzinfo=UTC)),),
        max_operations=10,
        allowed=("ADD", "UPDATE", "NOOP"),
    )


async def test_asks_for_facts_with_a_json_schema_and_the_packaged_prompt(
    server: FakeChatServer,
) -> None:
    answer = await extractor(server).facts(MESSAGES)
    assert json.loads(answer) == facts("I moved to Berlin.", "My daughter is Eva.")
    [sent] = server.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {SECRET}"
    assert sent.body["model"] == "test-chat"
    assert sent.body["temperature"] == 0.0
    assert sent.system == prompt("extract-v2-facts")
    assert sent.payload == {"messages": [{"role": "user", "content": MESSAGES[0].content}]}
    schema = sent.body["response_format"]
    assert schema["type"] == "json_schema"
    assert schema["json_schema"]["name"] == "memsvc_facts"
    assert schema["json_schema"]["strict"] is True


async def test_asks_for_operations_showing_handles_never_ids(server: FakeChatServer) -> None:
    await extractor(server).operations(request())
    [sent] = server.requests
    assert sent.step == "operations"
    assert sent.payload == {
        "messages": [{"role": "user", "content": MESSAGES[0].content}],
        "facts": [{"fact": "The user lives in Berlin.", "related": ["m1"]}],
        "memories": [
            {"ref": "m1", "content": "The user lives in Paris.",
             "created_at": "2024-03-01T00:00:00+00:00"}
        ],
        "allowed": ["ADD", "UPDATE", "NOOP"],
        "max_operations": 10,
    }
    schema = sent.body["response_format"]["json_schema"]["schema"]
    op_enum = schema["properties"]["operations"]["items"]["properties"]["op"]["enum"]
    assert op_enum == ["ADD", "UPDATE", "NOOP"]


async def test_falls_back_to_a_tool_call_where_json_schema_is_refused_and_keeps_to_it() -> None:
    with serving(supports=("tool",)) as server:
        client = extractor(server)
        first = await client.facts(MESSAGES)
        second = await client.facts(MESSAGES)
    assert json.loads(first) == json.loads(second) == facts(
        "I moved to Berlin.", "My daughter is Eva."
    )
    # Refused once, then the tool call, which it keeps to.
    assert [r.way for r in server.requests] == ["json_schema", "tool", "tool"]
    tool = server.requests[1].body
    assert tool["tool_choice"] == {"type": "function", "function": {"name": "memsvc_facts"}}
    assert client.chat.confirmed == "tool"


async def test_tries_the_tool_call_once_when_json_schema_answers_free_text(
    server: FakeChatServer,
) -> None:
    server.then(Reply(content="Facts: the user moved."), Reply(answer=facts("The user moved.")))
    answer = await extractor(server).facts(MESSAGES)
    assert json.loads(answer) == facts("The user moved.")
    assert [r.way for r in server.requests] == ["json_schema", "tool"]


async def test_a_fixed_way_is_used_as_given() -> None:
    with serving(supports=("json_schema",)) as server:
        with pytest.raises(ExtractionError) as raised:
            await extractor(server, structured_output="tool").facts(MESSAGES)
    assert raised.value.status == 400
    assert [r.way for r in server.requests] == ["tool"]


async def test_a_malformed_model_answer_is_returned_as_written_for_the_checks(
    server: FakeChatServer,
) -> None:
    server.then(Reply(content="I cannot help with that."), Reply(content="still no JSON"))
    assert await extractor(server).facts(MESSAGES) == "still no JSON"


async def test_429_is_retried_after_what_retry_after_asks(server: FakeChatServer) -> None:
    server.then(Reply(status=429, headers={"Retry-After": "0.4"}))
    started = time.monotonic()
    answer = await extractor(server).operations(request())
    assert time.monotonic() - started >= 0.4
    assert json.loads(answer)["operations"][0]["op"] == "ADD"
    assert len(server.requests) == 2


async def test_a_retry_after_longer_than_the_longest_backoff_fails_at_once(
    server: FakeChatServer,
) -> None:
    server.then(Reply(status=429, headers={"Retry-After": "120"}))
    with pytest.raises(ExtractionError) as raised:
        await extractor(server, max_backoff_s=5).facts(MESSAGES)
    assert raised.value.retryable and raised.value.status == 429
    assert "asked to retry after 120s" in str(raised.value)
    assert len(server.requests) == 1


async def test_5xx_is_retried_then_reported_naming_the_endpoint_and_model_not_the_key(
    server: FakeChatServer,
) -> None:
    server.then(Reply(status=503), Reply(status=502))
    assert json.loads(await extractor(server).facts(MESSAGES))["facts"]
    assert len(server.requests) == 3
    server.then(*(Reply(status=500) for _ in range(4)))
    with pytest.raises(ExtractionError) as raised:
        await extractor(server, max_retries=3).facts(MESSAGES)
    error = raised.value
    assert error.status == 500 and error.retryable
    assert f"{server.base_url}/chat/completions" in str(error) and "'test-chat'" in str(error)
    assert SECRET not in str(error) and SECRET not in repr(extractor(server))
    assert len(server.requests) == 3 + 4


async def test_a_slow_server_times_out_and_is_retried(server: FakeChatServer) -> None:
    server.then(Reply(delay_s=1.0), Reply(delay_s=1.0))
    with pytest.raises(ExtractionError) as raised:
        await extractor(server, timeout_s=0.2, max_retries=1).facts(MESSAGES)
    assert raised.value.retryable
    assert "did not answer within 0.2s" in str(raised.value)
    assert len(server.requests) == 2


async def test_a_rejected_key_is_not_retried(server: FakeChatServer) -> None:
    server.then(Reply(status=401))
    with pytest.raises(ExtractionError) as raised:
        await extractor(server).facts(MESSAGES)
    assert raised.value.status == 401 and not raised.value.retryable
    assert "check the API key" in str(raised.value) and SECRET not in str(raised.value)
    assert len(server.requests) == 1


async def test_a_body_that_is_not_json_is_an_extraction_error(server: FakeChatServer) -> None:
    server.then(Reply(body=b"<html>gateway</html>"))
    with pytest.raises(ExtractionError, match="answered with something not JSON"):
        await extractor(server).facts(MESSAGES)


async def test_an_unreachable_endpoint_is_a_retryable_extraction_error() -> None:
    with serving() as server:
        url = server.base_url
    client = OpenAIChatExtractor(url, "m", max_retries=1, backoff_s=0.01)
    with pytest.raises(ExtractionError) as raised:
        await client.facts(MESSAGES)
    assert raised.value.retryable and "could not reach" in str(raised.value)


def test_bad_client_options_are_validation_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"base_url": None}, "base_url"),
        ({"base_url": "ftp://x"}, "base_url"),
        ({"model": " "}, "model"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"max_retries": -1}, "max_retries"),
        ({"structured_output": "xml"}, "structured_output"),
    ]
    for options, field in cases:
        arguments = {"base_url": "http://localhost:1/v1", "model": "m", **options}
        with pytest.raises(ValidationError) as raised:
            OpenAIChatExtractor(**arguments)
        assert raised.value.field == field


async def test_the_api_key_and_base_url_default_to_the_openai_variables(
    server: FakeChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    await OpenAIChatExtractor(None, "m").facts(MESSAGES)
    assert server.requests[-1].headers["authorization"] == "Bearer sk-env"
    monkeypatch.delenv("OPENAI_API_KEY")
    await OpenAIChatExtractor(server.base_url, "m").facts(MESSAGES)
    assert "authorization" not in server.requests[-1].headers


async def test_one_extractor_serves_several_event_loops(server: FakeChatServer) -> None:
    client = extractor(server)
    await client.facts(MESSAGES)
    answer = await asyncio.to_thread(asyncio.run, client.facts(MESSAGES))
    assert json.loads(answer)["facts"]
    await client.aclose()


# ------------------------------------------------------------------ summarizer


async def test_the_chat_summarizer_returns_the_models_summary(server: FakeChatServer) -> None:
    summarizer = OpenAIChatSummarizer(server.base_url, "test-chat", backoff_s=0.01)
    members = [
        SummaryMember("Ana lives in Berlin.", created_at=datetime(2024, 6, 1, tzinfo=UTC)),
        SummaryMember("Ana works at Globex."),
    ]
    assert await summarizer.summarize(members) == "Ana lives in Berlin. Ana works at Globex."
    [sent] = server.requests
    assert sent.step == "summary" and sent.system == prompt("summarize-v1")
    assert sent.payload == {
        "memories": [
            {"content": "Ana lives in Berlin.", "created_at": "2024-06-01T00:00:00+00:00"},
            {"content": "Ana works at Globex."},
        ]
    }


async def test_the_chat_summarizer_refuses_an_unusable_or_oversized_summary(
    server: FakeChatServer,
) -> None:
    summarizer = OpenAIChatSummarizer(server.base_url, "m", backoff_s=0.01, max_chars=20)
    members = [SummaryMember("a"), SummaryMember("b")]
    server.then(Reply(content="no JSON"), Reply(content="still none"))
    with pytest.raises(ExtractionError, match="without a summary"):
        await summarizer.summarize(members)
    server.then(Reply(answer={"summary": "x" * 21}))
    with pytest.raises(ExtractionError, match="over max_chars=20"):
        await summarizer.summarize(members)
    server.then(Reply(answer=operations(add("wrong step"))))
    with pytest.raises(ExtractionError, match="without a summary"):
        await summarizer.summarize(members)
