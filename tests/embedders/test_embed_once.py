"""The same text is never embedded twice for the same scope."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import numpy as np
import pytest

from memsvc import HashingEmbedder, MemoryService, Scope, Settings


class CountingEmbedder:
    """A HashingEmbedder that records every text it is asked to embed."""

    def __init__(self, dim: int) -> None:
        self._inner = HashingEmbedder(dim)
        self.calls: list[list[str]] = []
        self.before_answer: Callable[[], Any] | None = None

    @property
    def texts(self) -> list[str]:
        return [text for call in self.calls for text in call]

    async def __call__(self, texts: Sequence[str]) -> list[Any]:
        self.calls.append(list(texts))
        if self.before_answer is not None:
            await self.before_answer()
        return await self._inner(texts)


@pytest.fixture
def counting(settings: Settings) -> CountingEmbedder:
    return CountingEmbedder(settings.embedding_dim)


@pytest.fixture
async def counted(settings: Settings, counting: CountingEmbedder) -> AsyncIterator[MemoryService]:
    async with MemoryService.open(settings, embedder=counting) as service:
        yield service


async def test_a_duplicate_add_returns_the_stored_memory_without_embedding(
    counted: MemoryService, counting: CountingEmbedder, scope: Scope
) -> None:
    first = await counted.memories.add(scope, "the build uses python 3.12")
    again = await counted.memories.add(scope, "the build uses python 3.12", importance=0.9)
    assert again == first
    assert counting.texts == ["the build uses python 3.12"]
    assert await counted.memories.count(scope) == 1


async def test_the_same_text_in_another_scope_is_embedded_there(
    counted: MemoryService, counting: CountingEmbedder, scope: Scope
) -> None:
    first = await counted.memories.add(scope, "shared words")
    other = await counted.memories.add(scope.with_session("s-43"), "shared words")
    assert other.id != first.id
    assert counting.texts == ["shared words", "shared words"]


async def test_a_retried_add_with_its_id_is_not_embedded_again(
    counted: MemoryService, counting: CountingEmbedder, scope: Scope
) -> None:
    first = await counted.memories.add(scope, "retry me")
    again = await counted.memories.add(scope, "retry me", id=first.id)
    assert again == first
    assert counting.texts == ["retry me"]


async def test_a_keyed_memory_does_not_count_as_stored_content(
    counted: MemoryService, counting: CountingEmbedder, scope: Scope
) -> None:
    keyed = await counted.memories.put(scope, "units", "metric")
    plain = await counted.memories.add(scope, "metric")
    assert plain.id != keyed.id
    assert counting.texts == ["metric", "metric"]


async def test_add_many_embeds_only_new_distinct_texts(
    counted: MemoryService, counting: CountingEmbedder, scope: Scope
) -> None:
    known = await counted.memories.add(scope, "already known")
    counting.calls.clear()
    result = await counted.memories.add_many(
        scope, ["new one", "already known", "new two", "new one", {"content": "new two"}]
    )
    assert counting.calls == [["new one", "new two"]]
    assert result[1] == known
    assert result[0].id == result[3].id and result[2].id == result[4].id
    assert len({m.id for m in result}) == 3
    assert await counted.memories.count(scope) == 3
    assert result[0].embedding == pytest.approx(
        HashingEmbedder(384).embed_one("new one").tolist(), abs=1e-6
    )
    counting.calls.clear()
    again = await counted.memories.add_many(scope, ["new two", "already known"])
    assert counting.calls == []
    assert [m.id for m in again] == [result[2].id, known.id]


async def test_add_many_keeps_a_stored_vector_when_its_row_is_deleted_meanwhile(
    counted: MemoryService, counting: CountingEmbedder, scope: Scope
) -> None:
    # Between looking up stored embeddings and inserting, the stored row goes:
    # the batch must still insert that content, with the vector it had.
    known = await counted.memories.add(scope, "about to vanish")
    counting.calls.clear()

    async def delete_known() -> None:
        await counted.memories.delete(known.id)

    counting.before_answer = delete_known
    first, second = await counted.memories.add_many(scope, ["about to vanish", "brand new"])
    assert counting.calls == [["brand new"]]
    assert first.id != known.id and first.content == "about to vanish"
    assert first.embedding is not None and known.embedding is not None
    assert np.allclose(first.embedding, known.embedding)
    assert second.content == "brand new"
    assert await counted.memories.count(scope) == 2


async def test_concurrent_duplicate_adds_store_one_memory(
    counted: MemoryService, counting: CountingEmbedder, scope: Scope
) -> None:
    memories = await asyncio.gather(
        *[counted.memories.add(scope, "raced content") for _ in range(12)]
    )
    assert len({m.id for m in memories}) == 1
    assert await counted.memories.count(scope) == 1
    # Racers that looked before the first insert embed; none that looked after.
    before = len(counting.texts)
    await counted.memories.add(scope, "raced content")
    assert len(counting.texts) == before


async def test_an_explicit_embedding_never_calls_the_embedder(
    counted: MemoryService, counting: CountingEmbedder, scope: Scope
) -> None:
    vector = HashingEmbedder(384).embed_one("anything")
    await counted.memories.add(scope, "given vector", embedding=vector)
    await counted.memories.add_many(scope, [{"content": "given too", "embedding": vector}])
    assert counting.calls == []
