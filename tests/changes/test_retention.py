"""Retention of the change feed: gc removes old events in batches; a cursor behind what
gc removed raises CursorExpiredError, never a silent gap."""

from __future__ import annotations

import asyncpg
import pytest

from memsvc import CursorExpiredError, MemoryService, Scope, Settings
from tests.changes.helpers import take


async def _age_events(dsn: str, count: int) -> None:
    """Make the oldest ``count`` events of each ledger three days old."""
    conn = await asyncpg.connect(dsn)
    try:
        for table in ("memory_events", "entity_events"):
            await conn.execute(
                f"UPDATE memsvc.{table} SET at = now() - interval '3 days' WHERE event_id IN "
                f"(SELECT event_id FROM memsvc.{table} ORDER BY event_id LIMIT $1)",
                count,
            )
    finally:
        await conn.close()


async def test_gc_removes_old_events_and_an_old_cursor_gets_a_clear_error(
    settings: Settings, scope: Scope
) -> None:
    keeping = settings.model_copy(update={"change_retention_days": 1.0})
    async with MemoryService.open(keeping) as svc:
        memories = [await svc.memories.add(scope, f"fact {i}") for i in range(6)]
        for _ in range(2):
            await svc.checkpoints.create(scope, {"n": 1})
        await svc.memories.update(memories[0].id, content="fact 0, edited")
        before = await take(svc.changes(), 9)
        await _age_events(svc.dsn, 4)

        report = await svc.maintenance.gc(batch_size=2)

        # gc removes the feed's oldest events up to the first one it keeps:
        # the four aged memory events, not the aged checkpoint events behind
        # the kept ones (they go once everything before them is old enough).
        assert report.change_events_removed == 4
        # The edit survived but the memory's creation is gone from its history.
        assert [e.kind for e in await svc.memories.history(memories[0].id)] == ["updated"]
        with pytest.raises(CursorExpiredError, match="since=\"now\""):
            await take(svc.changes(since=before[0].cursor), 1)
        # From the oldest retained: exactly what gc kept, in order.
        kept = await take(svc.changes(), 5)
        assert [c.cursor for c in kept] == [c.cursor for c in before[4:]]
        # A cursor at or after what gc removed still resumes.
        after = await take(svc.changes(since=kept[0].cursor), 4)
        assert [c.cursor for c in after] == [c.cursor for c in kept[1:]]


async def test_gc_keeps_every_event_without_a_retention_setting(
    service: MemoryService, scope: Scope
) -> None:
    await service.memories.add(scope, "kept forever")
    await _age_events(service.dsn, 10)
    report = await service.maintenance.gc()
    assert report.change_events_removed == 0
    assert len(await take(service.changes(), 1)) == 1


async def test_as_of_reads_refuse_moments_whose_history_retention_removed(
    settings: Settings, scope: Scope
) -> None:
    from datetime import UTC, datetime

    from memsvc import ValidationError

    keeping = settings.model_copy(update={"change_retention_days": 1.0})
    async with MemoryService.open(keeping) as svc:
        memory = await svc.memories.add(scope, "first words")
        await svc.memories.update(memory.id, content="second words")
        between = datetime.now(UTC)
        await svc.memories.update(memory.id, content="third words")
        assert (await svc.memories.get(memory.id, as_of=between)).content == "second words"
        await _age_events(svc.dsn, 2)  # the creation and the first edit

        report = await svc.maintenance.gc()

        assert report.change_events_removed == 2
        # The first edit's event held what "between" needs: it is gone, so the
        # moment is refused rather than rebuilt wrongly (as "first words"'s
        # absence would make the memory look newer than it is).
        with pytest.raises(ValidationError) as refused:
            await svc.memories.get(memory.id, as_of=between)
        assert refused.value.field == "as_of"
        assert "history horizon" in str(refused.value)
        # Moments after the newest removed event are still exact.
        assert (await svc.memories.get(memory.id, as_of=datetime.now(UTC))).content == (
            "third words"
        )


async def test_the_first_gc_run_locks_the_horizon_row_it_creates(settings: Settings) -> None:
    """gc runs raise the horizon one at a time: even the first, which creates its row,
    holds the row's lock (a SELECT cannot lock a row its own statement inserts)."""
    from memsvc.changes import queries as feed_q

    async with MemoryService.open(settings) as svc:
        schema = settings.db_schema
        async with svc.pool.acquire() as first, first.transaction():
            await first.execute(feed_q.seed_horizon(schema))
            assert await first.fetchval(feed_q.lock_horizon(schema)) == ""
        async with svc.pool.acquire() as first, first.transaction():
            await first.execute(feed_q.seed_horizon(schema))
            await first.fetchval(feed_q.lock_horizon(schema))
            async with svc.pool.acquire() as second, second.transaction():
                with pytest.raises(asyncpg.LockNotAvailableError):
                    await second.fetchval(feed_q.lock_horizon(schema) + " NOWAIT")
