"""Lock waits and statement timeouts end as typed errors within their budget,
and the interrupted transaction leaves nothing half-written."""

from __future__ import annotations

import time

import asyncpg
import pytest

from memsvc import ConcurrencyError, Scope, StorageError
from tests.reliability.conftest import bounded

MARGIN_S = 2.0  # scheduling slack on a loaded 2-core machine


@pytest.mark.timeout(60)
async def test_update_of_a_locked_row_fails_within_lock_timeout_and_writes_nothing(
    open_service, admin: asyncpg.Connection, scope: Scope
) -> None:
    async with open_service(lock_timeout_ms=300) as service:
        memory = await service.memories.add(scope, "the original text")
        async with admin.transaction():
            await admin.execute("SELECT 1 FROM memsvc.memories WHERE id = $1 FOR UPDATE", memory.id)
            started = time.monotonic()
            with pytest.raises(ConcurrencyError) as raised:
                await bounded(service.memories.update(memory.id, content="changed"), 30)
            assert time.monotonic() - started < 0.3 + MARGIN_S
        assert getattr(raised.value.__cause__, "sqlstate", None) == "55P03"
        unchanged = await service.memories.get(memory.id)
        assert (unchanged.content, unchanged.version) == ("the original text", 1)
        assert [e.kind for e in await service.memories.history(memory.id)] == ["created"]
        # Once the lock is gone the same update goes through.
        assert (await service.memories.update(memory.id, content="changed")).version == 2


@pytest.mark.timeout(60)
async def test_statement_timeout_cancels_a_blocked_update_and_writes_nothing(
    open_service, admin: asyncpg.Connection, scope: Scope
) -> None:
    async with open_service(lock_timeout_ms=0, statement_timeout_ms=400) as service:
        memory = await service.memories.add(scope, "the original text")
        async with admin.transaction():
            await admin.execute("SELECT 1 FROM memsvc.memories WHERE id = $1 FOR UPDATE", memory.id)
            started = time.monotonic()
            with pytest.raises(StorageError) as raised:
                await bounded(service.memories.update(memory.id, metadata={"k": 1}), 30)
            assert time.monotonic() - started < 0.4 + MARGIN_S
        assert raised.value.sqlstate == "57014"
        unchanged = await service.memories.get(memory.id)
        assert (unchanged.metadata, unchanged.version) == ({}, 1)
        assert [e.kind for e in await service.memories.history(memory.id)] == ["created"]


@pytest.mark.timeout(60)
async def test_delete_blocked_on_its_assembly_rolls_back_whole(
    open_service, admin: asyncpg.Connection, scope: Scope
) -> None:
    """delete locks the memory, then its assemblies: a timeout on the second lock
    must undo the first step too (the memory and its membership stay)."""
    async with open_service(lock_timeout_ms=300) as service:
        memory = await service.memories.add(scope, "a member")
        assembly = await service.assemblies.create(scope, "group", memory_ids=[memory.id])
        async with admin.transaction():
            await admin.execute(
                "SELECT 1 FROM memsvc.assemblies WHERE id = $1 FOR UPDATE", assembly.id
            )
            started = time.monotonic()
            with pytest.raises(ConcurrencyError):
                await bounded(service.memories.delete(memory.id), 30)
            assert time.monotonic() - started < 0.3 + MARGIN_S
        assert (await service.memories.get(memory.id)).id == memory.id
        after = await service.assemblies.get(assembly.id)
        assert after.member_count == 1
        assert [m.id for m in await service.assemblies.members(assembly.id)] == [memory.id]
        assert [e.kind for e in await service.memories.history(memory.id)] == ["created"]
