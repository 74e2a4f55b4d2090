"""The seam where valid time plugs in: a store with ``supersede`` and ``invalidate``.

Issue 29 adds those methods to ``svc.memories``. Until then, this test's
store implements them on today's public API (a new memory, and the old
one's metadata patched), on the real database, to prove the pipeline offers
SUPERSEDE and INVALIDATE exactly when a store has them, passes only the
arguments a method takes, and runs them in the batch's transaction.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg

from memsvc import ConflictError, Memory, MemoryService, OpenAIChatExtractor, Scope
from memsvc.memories.repository import MemoryRepository
from memsvc.remember import Remembering
from tests.extraction.fake_chat import (
    FakeChatServer,
    Reply,
    add,
    facts,
    invalidate,
    operations,
    supersede,
)

SCOPE = Scope("acme", "bridge", "planner", "s-1")


class ValidTimeStore(MemoryRepository):
    """Today's repository plus ``supersede`` and ``invalidate`` of the shape issue 29 names."""

    async def supersede(
        self,
        old_id: uuid.UUID,
        content: str,
        *,
        valid_from: datetime | None = None,
        metadata: dict[str, Any] | None = None,
        tenant: str | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> Memory:
        old = await self.get(old_id, tenant=tenant, conn=conn)
        new = await self.add(old.scope, content, metadata=metadata, conn=conn)
        if "superseded_by" in old.metadata:
            raise ConflictError(f"memory {old_id} is already superseded")
        when = (valid_from or datetime.now(UTC)).isoformat()
        await self.patch_metadata(
            old_id, {"superseded_by": str(new.id), "valid_to": when}, tenant=tenant, conn=conn
        )
        return new

    async def invalidate(
        self,
        id: uuid.UUID,
        *,
        at: datetime | None = None,
        tenant: str | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> Memory:
        when = (at or datetime.now(UTC)).isoformat()
        return await self.patch_metadata(id, {"valid_to": when}, tenant=tenant, conn=conn)


async def test_a_store_with_valid_time_gets_supersede_and_invalidate_applied(
    service: MemoryService, chat: FakeChatServer, extractor: OpenAIChatExtractor
) -> None:
    store = ValidTimeStore(service.pool, service.settings, embedder=service.embedder)
    remembering = Remembering(service.pool, service.settings, memories=store)
    paris = await service.memories.add(SCOPE, "The user lives in Paris.")
    cat = await service.memories.add(SCOPE, "The user has a cat called Tom.")
    chat.then(
        Reply(answer=facts("The user lives in Berlin.", "The user's cat Tom died.")),
        Reply(
            answer=operations(
                {**supersede("m1", "The user lives in Berlin.", "2024-06-01"),
                 "metadata": [{"key": "slot", "value": "home"}]},
                invalidate("m2", "2024-07-01T00:00:00Z"),
                add("The user misses Tom."),
            )
        ),
    )
    messages = [{"role": "user", "content": "We moved to Berlin; Tom died.", "id": "u1"}]
    result = await remembering.remember(SCOPE, messages, extractor=extractor)
    assert chat.requests[-1].payload["allowed"] == [
        "ADD", "UPDATE", "SUPERSEDE", "INVALIDATE", "NOOP"
    ]
    refs = {m["ref"]: m["content"] for m in chat.requests[-1].payload["memories"]}
    assert refs["m1"] == paris.content and refs["m2"] == cat.content
    assert result.skipped == () and [a.operation.op for a in result.applied] == [
        "SUPERSEDE", "INVALIDATE", "ADD"
    ]
    berlin = result.applied[0].memory
    assert berlin is not None and berlin.content == "The user lives in Berlin."
    assert berlin.metadata["provenance"]["operation"] == "SUPERSEDE"
    assert berlin.metadata["slot"] == "home"  # a supersede's metadata, as an add's
    old = await service.memories.get(paris.id)
    assert old.metadata == {
        "superseded_by": str(berlin.id), "valid_to": "2024-06-01T00:00:00+00:00"
    }
    assert (await service.memories.get(cat.id)).metadata == {
        "valid_to": "2024-07-01T00:00:00+00:00"
    }


async def test_a_supersede_the_store_refuses_midway_is_rolled_back_alone(
    service: MemoryService, chat: FakeChatServer, extractor: OpenAIChatExtractor
) -> None:
    store = ValidTimeStore(service.pool, service.settings, embedder=service.embedder)
    remembering = Remembering(service.pool, service.settings, memories=store)
    # Already superseded: this store writes the new memory, then refuses.
    await service.memories.add(
        SCOPE, "The user lives in Paris.", metadata={"superseded_by": "someone"}
    )
    chat.then(
        Reply(answer=facts("The user lives in Berlin.")),
        Reply(answer=operations(supersede("m1", "The user lives in Berlin."),
                                add("The user likes tea."))),
    )
    messages = [{"role": "user", "content": "Berlin. Tea.", "id": "u1"}]
    result = await remembering.remember(SCOPE, messages, extractor=extractor)
    assert [a.operation.op for a in result.applied] == ["ADD"]
    [refused] = result.skipped
    assert refused.index == 0 and refused.stage == "apply"
    assert "already superseded" in refused.reason
    contents = sorted(m.content for m in await service.memories.list(SCOPE, limit=10))
    assert contents == ["The user likes tea.", "The user lives in Paris."]
