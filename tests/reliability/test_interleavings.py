"""Step-by-step interleavings of two sessions: lost update, write skew on the
per-scope limit, and read skew between an assembly's count and its members."""

from __future__ import annotations

import asyncio
import random

import asyncpg
import pytest

from memsvc import ConflictError, MemoryService, Scope
from tests.reliability.conftest import bounded

STEP_BOUND_S = 15.0


async def _until_memsvc_waits_on_a_lock(admin: asyncpg.Connection) -> None:
    while not await admin.fetchval(
        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'memsvc'"
        " AND datname = current_database() AND wait_event_type = 'Lock')"
    ):
        await asyncio.sleep(0.02)


# ------------------------------------------------------------------ lost update


@pytest.mark.timeout(60)
async def test_second_writer_of_a_stale_version_is_refused(
    service: MemoryService, scope: Scope
) -> None:
    memory = await service.memories.add(scope, "v0")
    seen_by_a = await service.memories.get(memory.id)
    seen_by_b = await service.memories.get(memory.id)
    await service.memories.update(memory.id, content="from A", expected_version=seen_by_a.version)
    with pytest.raises(ConflictError):
        await service.memories.update(
            memory.id, content="from B", expected_version=seen_by_b.version
        )
    final = await service.memories.get(memory.id)
    assert (final.content, final.version) == ("from A", 2)
    assert [e.kind for e in await service.memories.history(memory.id)] == ["created", "updated"]


@pytest.mark.timeout(60)
async def test_writer_blocked_behind_an_uncommitted_update_sees_the_new_version(
    service: MemoryService, admin: asyncpg.Connection, scope: Scope
) -> None:
    """A updates in its open transaction; B (same expected version) waits on the
    row lock; A commits; B must then fail, not overwrite A."""
    memory = await service.memories.add(scope, "v0")
    async with service.pool.acquire() as conn_a, service.pool.acquire() as conn_b:
        tx_a = conn_a.transaction()
        await tx_a.start()
        await service.memories.update(memory.id, content="from A", expected_version=1, conn=conn_a)
        async with conn_b.transaction():
            b = asyncio.create_task(
                service.memories.update(
                    memory.id, content="from B", expected_version=1, conn=conn_b
                )
            )
            await bounded(_until_memsvc_waits_on_a_lock(admin), STEP_BOUND_S)
            await tx_a.commit()
            with pytest.raises(ConflictError):
                await bounded(b, STEP_BOUND_S)
    final = await service.memories.get(memory.id)
    assert (final.content, final.version) == ("from A", 2)


# ------------------------------------------------------------------ write skew


LIMIT = 5


@pytest.mark.timeout(60)
async def test_racing_adds_to_a_nearly_full_scope_admit_exactly_one(open_service) -> None:
    scope = Scope(tenant="limits", session="s-1")
    async with open_service(max_memories_per_scope=LIMIT) as service:
        for i in range(LIMIT - 1):
            await service.memories.add(scope, f"existing {i}")
        outcomes = await bounded(
            asyncio.gather(
                *(service.memories.add(scope, f"racer {i}") for i in range(20)),
                return_exceptions=True,
            ),
            STEP_BOUND_S * 2,
        )
        unexpected = [
            o for o in outcomes if isinstance(o, BaseException) and not isinstance(o, ConflictError)
        ]
        assert not unexpected, unexpected
        assert sum(not isinstance(o, BaseException) for o in outcomes) == 1
        assert await service.memories.count(scope) == LIMIT


@pytest.mark.timeout(60)
async def test_two_open_transactions_cannot_both_take_the_last_slot(
    open_service, admin: asyncpg.Connection
) -> None:
    """Write skew, step by step: A and B each see room for one more; A adds in
    its open transaction; B adds; A commits. B must fail, not both succeed."""
    scope = Scope(tenant="limits", session="s-2")
    async with open_service(max_memories_per_scope=LIMIT) as service:
        for i in range(LIMIT - 1):
            await service.memories.add(scope, f"existing {i}")
        async with service.pool.acquire() as conn_a, service.pool.acquire() as conn_b:
            tx_a, tx_b = conn_a.transaction(), conn_b.transaction()
            await tx_a.start()
            await tx_b.start()
            assert await service.memories.count(scope, conn=conn_a) == LIMIT - 1
            assert await service.memories.count(scope, conn=conn_b) == LIMIT - 1
            await service.memories.add(scope, "from A", conn=conn_a)
            b = asyncio.create_task(service.memories.add(scope, "from B", conn=conn_b))
            done, _ = await asyncio.wait({b}, timeout=0.5)
            if not done:  # B waits for A's decision, as it should
                await tx_a.commit()
                with pytest.raises(ConflictError):
                    await bounded(b, STEP_BOUND_S)
            else:  # B went ahead: committing both must not leave LIMIT + 1 rows
                b_error = b.exception()
                await tx_a.commit()
                assert isinstance(b_error, ConflictError), "both took the last slot"
            await tx_b.rollback()
        assert await service.memories.count(scope) == LIMIT


# ------------------------------------------------------------------ read skew


@pytest.mark.timeout(90)
async def test_assembly_count_matches_its_members_in_every_snapshot(
    service: MemoryService, admin: asyncpg.Connection, scope: Scope
) -> None:
    memories = await service.memories.add_many(scope, [f"memory {i}" for i in range(40)])
    ids = [m.id for m in memories]
    # ids[:30] join and leave; ids[30:] are members that get deleted meanwhile.
    joining, doomed = ids[:30], ids[30:]
    assembly = await service.assemblies.create(scope, "group", memory_ids=ids[:10] + doomed)
    rng = random.Random(3)
    stop = asyncio.Event()
    mismatches: list[tuple[int, int]] = []
    snapshots = 0

    async def mutator(n: int) -> None:
        for _ in range(40):
            sample = rng.sample(joining, 3)
            choice = rng.random()
            if choice < 0.45:
                await service.assemblies.add_members(assembly.id, sample)
            elif choice < 0.9 or not doomed:
                await service.assemblies.remove_members(assembly.id, sample)
            else:
                await service.memories.delete(doomed.pop())

    async def reader() -> None:
        nonlocal snapshots
        while not stop.is_set():
            async with admin.transaction(isolation="repeatable_read", readonly=True):
                count = await admin.fetchval(
                    "SELECT member_count FROM memsvc.assemblies WHERE id = $1", assembly.id
                )
                members = await admin.fetchval(
                    "SELECT count(*) FROM memsvc.assembly_members WHERE assembly_id = $1",
                    assembly.id,
                )
            snapshots += 1
            if count != members:
                mismatches.append((count, members))

    reading = asyncio.create_task(reader())
    try:
        await bounded(asyncio.gather(*(mutator(n) for n in range(6))), 60)
    finally:
        stop.set()
        await bounded(reading, STEP_BOUND_S)
    assert snapshots > 0
    assert mismatches == []
    final = await service.assemblies.get(assembly.id)
    members = [m.id for m in await service.assemblies.members(assembly.id, limit=1000)]
    assert final.member_count == len(members) == len(set(members))
