"""gc: expired memories deleted exactly once by concurrent workers, retention, idle sessions."""

from __future__ import annotations

import asyncio
import math

import asyncpg
import pytest

from memsvc import MemoryService, Scope, ValidationError

from .conftest import Cli, open_service


async def _expire(db: asyncpg.Connection, ids: list[object]) -> None:
    await db.execute(
        "UPDATE memsvc.memories SET expires_at = now() - interval '1 second' "
        "WHERE id = ANY($1::uuid[])",
        ids,
    )


async def test_two_concurrent_workers_delete_each_expired_row_exactly_once(
    service: MemoryService, db: asyncpg.Connection, memsvc_database_url: str
) -> None:
    scopes = [Scope("acme", "p1"), Scope("acme", "p1", "a1", "s1"), Scope("other")]
    memories = []
    for scope in scopes:
        memories += await service.memories.add_many(
            scope, [f"memory {scope.depth} number {i}" for i in range(200)]
        )
    expired = [m for i, m in enumerate(memories) if i % 3 != 0]
    live = [m for i, m in enumerate(memories) if i % 3 == 0]
    group = await service.assemblies.create(
        scopes[0], "mixed", memory_ids=[m.id for m in memories[:200:7]]
    )
    await _expire(db, [m.id for m in expired])

    second = await open_service(memsvc_database_url)
    try:
        reports = await asyncio.gather(
            service.maintenance.gc(batch_size=40), second.maintenance.gc(batch_size=40)
        )
    finally:
        await second.close()

    assert sum(r.expired_deleted for r in reports) == len(expired)
    assert all(r.expired_deleted > 0 for r in reports), "both workers should have had work"
    deleted_events = await db.fetch(
        "SELECT memory_id, count(*) AS n FROM memsvc.memory_events WHERE kind = 'deleted' "
        "GROUP BY memory_id"
    )
    assert {r["memory_id"] for r in deleted_events} == {m.id for m in expired}
    assert all(r["n"] == 1 for r in deleted_events)
    remaining = {r["id"] for r in await db.fetch("SELECT id FROM memsvc.memories")}
    assert remaining == {m.id for m in live}
    # The assembly lost exactly its expired members, through the delete hook.
    survivors = [m.id for m in memories[:200:7] if m in live]
    stored = await service.assemblies.get(group.id)
    assert stored.member_count == len(survivors)
    assert (await service.maintenance.doctor()).ok


async def test_gc_prunes_checkpoints_past_retention(
    service: MemoryService, memsvc_database_url: str
) -> None:
    session = Scope("acme", "p", "a", "s-1")
    for i in range(6):
        await service.checkpoints.create(session, {"step": i})
    strict = await open_service(memsvc_database_url, checkpoint_keep_last=2)
    try:
        report = await strict.maintenance.gc()
    finally:
        await strict.close()
    assert report.checkpoints_pruned == 4
    kept = await service.checkpoints.list(session, with_data=True)
    assert [c.data for c in kept] == [{"step": 5}, {"step": 4}]


async def test_gc_removes_idle_sessions_only_when_asked(
    service: MemoryService, db: asyncpg.Connection, cli: Cli
) -> None:
    old = Scope("acme", "p", "a", "old-session")
    new = Scope("acme", "p", "a", "new-session")
    project = Scope("acme", "p")
    old_memories = await service.memories.add_many(old, ["stale fact one", "stale fact two"])
    await service.assemblies.create(old, "stale group", memory_ids=[old_memories[0].id])
    await service.checkpoints.create(old, {"old": True})
    await service.memories.add(new, "fresh fact")
    await service.memories.add(project, "project-wide fact, never idle-collected")
    await db.execute(
        "UPDATE memsvc.memories SET created_at = now() - interval '40 days', "
        "updated_at = now() - interval '40 days' WHERE session_id = 'old-session'"
    )
    await db.execute(
        "UPDATE memsvc.assemblies SET updated_at = now() - interval '40 days' "
        "WHERE session_id = 'old-session'"
    )
    await db.execute(
        "UPDATE memsvc.session_checkpoints SET created_at = now() - interval '40 days' "
        "WHERE session_id = 'old-session'"
    )

    plain = await cli("gc")
    assert plain.exit_code == 0, plain.output
    assert await service.memories.count(old) == 2  # off by default

    result = await cli("gc", "--idle-days", "30")
    assert result.exit_code == 0, result.output
    assert "idle sessions removed: 1 (2 memories, 1 assemblies, 1 checkpoints)" in result.output
    assert await service.memories.count(old) == 0
    assert await service.memories.count(new) == 1
    assert await service.memories.count(project) == 1
    assert await db.fetchval(
        "SELECT count(*) FROM memsvc.memory_events WHERE kind = 'deleted'"
    ) == 2


@pytest.mark.parametrize("days", [1e9, math.inf, 0])
async def test_an_idle_period_out_of_range_is_refused_before_gc_deletes_anything(
    service: MemoryService, db: asyncpg.Connection, days: float
) -> None:
    expired = await service.memories.add(Scope("acme"), "expired, waiting for gc")
    await _expire(db, [expired.id])
    with pytest.raises(ValidationError) as raised:
        await service.maintenance.gc(idle_session_days=days)
    assert raised.value.field == "idle_session_days"
    assert await db.fetchval("SELECT count(*) FROM memsvc.memories") == 1


async def test_background_gc_runs_until_the_service_closes(
    service: MemoryService, db: asyncpg.Connection, memsvc_database_url: str
) -> None:
    worker = await open_service(memsvc_database_url)
    task = worker.maintenance.start_background_gc(interval_s=0.05)
    memory = await service.memories.add(Scope("t"), "short-lived", ttl=3600)
    await _expire(db, [memory.id])
    for _ in range(100):
        if await db.fetchval("SELECT count(*) FROM memsvc.memories") == 0:
            break
        await asyncio.sleep(0.05)
    assert await db.fetchval("SELECT count(*) FROM memsvc.memories") == 0
    await worker.close()
    assert task.done()
