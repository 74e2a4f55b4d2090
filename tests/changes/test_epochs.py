"""Feed epochs: a database restored into another cluster starts a new epoch of the feed.

The ledgers order changes by the writing transaction's id, and a restored
database's new cluster hands out ids from its own, lower, counter. Cursors
from before the move get FeedEpochError (never a silent gap), the feed
resumes from a time or from the start, and changes to rows written before the
move are not held back behind ids the new cluster has not reached.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import datetime

import asyncpg
import pytest

from memsvc import (
    Change,
    CursorExpiredError,
    FeedEpochError,
    MemoryService,
    Scope,
    Settings,
    ValidationError,
)
from tests.changes.clusters import (
    Cluster,
    burn_transaction_ids,
    dump_and_restore,
    next_transaction_id,
)
from tests.changes.helpers import take

# Long enough for any delivery on a busy machine; a feed holding changes back
# (or not raising) fails the test when it runs out.
GUARD_S = 20
# The source database's ids stay this far ahead of the new cluster's, so the
# restore really puts every recorded change key above the ids it hands out.
ID_GAP = 3000


async def _restored(settings: Settings, other: Cluster) -> AsyncIterator[Settings]:
    """The settings' database restored into ``other``, whose ids are far below the source's."""
    assert settings.database_url is not None
    name, dsn = await dump_and_restore(settings.database_url, other)
    try:
        yield settings.model_copy(update={"database_url": dsn})
    finally:
        await other.drop_database(name)


async def _source_ahead(settings: Settings, other: Cluster) -> None:
    assert settings.database_url is not None
    behind = await next_transaction_id(other.dsn) + ID_GAP
    gap = behind - await next_transaction_id(settings.database_url)
    if gap > 0:
        await burn_transaction_ids(settings.database_url, gap)


async def _lowest_change_key(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(
            await conn.fetchval("SELECT min(change_key::text::numeric) FROM memsvc.memory_events")
        )
    finally:
        await conn.close()


def _seen(changes: list[Change]) -> list[tuple[uuid.UUID, int, str]]:
    return [(c.entity_id, c.version, c.kind) for c in changes]


async def test_a_cursor_from_before_a_restore_gets_an_epoch_error_saying_how_to_resume(
    settings: Settings, scope: Scope, other_cluster: Cluster
) -> None:
    await _source_ahead(settings, other_cluster)
    async with MemoryService.open(settings) as svc:
        kept = await svc.memories.add(scope, "kept across the move")
        await svc.memories.add(scope, "another one")
        await svc.memories.update(kept.id, content="kept, edited before the move")
        processed = (await take(svc.changes(), 2))[-1]

    async with contextlib.aclosing(_restored(settings, other_cluster)) as moves:
        moved = await anext(moves)
        assert moved.database_url is not None
        # The trap is real: every recorded key is above the ids the new cluster hands out.
        assert await next_transaction_id(moved.database_url) < await _lowest_change_key(
            moved.database_url
        )
        async with MemoryService.open(moved) as svc:
            await svc.memories.add(scope, "written after the move")
            with pytest.raises(FeedEpochError) as refused:
                await take(svc.changes(since=processed.cursor), 1, guard=GUARD_S)
    error = refused.value
    assert isinstance(error, CursorExpiredError)  # consumers handling expiry handle this too
    assert error.cursor_epoch is not None and error.current_epoch is not None
    assert error.cursor_epoch != error.current_epoch
    assert error.epoch_started_at is not None
    message = str(error)
    assert "another PostgreSQL cluster" in message
    assert "since=<datetime>" in message and "since=None" in message


async def test_after_a_restore_the_feed_resumes_from_a_time_or_the_start_holding_nothing_back(
    settings: Settings, scope: Scope, other_cluster: Cluster
) -> None:
    await _source_ahead(settings, other_cluster)
    async with MemoryService.open(settings) as svc:
        kept = await svc.memories.add(scope, "kept across the move")
        edited = await svc.memories.add(scope, "edited after the move")
        await svc.memories.update(kept.id, content="kept, edited before the move")
        before = await take(svc.changes(), 3)
    processed = before[1]  # the consumer stopped after the second change

    async with contextlib.aclosing(_restored(settings, other_cluster)) as moves:
        moved = await anext(moves)
        async with MemoryService.open(moved) as svc:
            # A change to a row written before the move: its key must not stay
            # above the new cluster's ids (the feed would hold it back for ever).
            await svc.memories.update(edited.id, content="edited after the move, v2")
            fresh = await svc.memories.add(scope, "written after the move")

            everything = await take(svc.changes(), 5, guard=GUARD_S)
            assert sorted(_seen(everything), key=str) == sorted(
                [*_seen(before), (edited.id, 2, "updated"), (fresh.id, 1, "created")], key=str
            )
            assert [c.version for c in everything if c.entity_id == edited.id] == [1, 2]
            assert [c.version for c in everything if c.entity_id == kept.id] == [1, 2]
            assert everything[-1].entity_id == fresh.id  # the new epoch's changes come last

            # From a time: every change after the one processed, some of them again.
            again = await take(svc.changes(since=processed.at), 4, guard=GUARD_S)
            assert set(_seen(before[2:])) <= set(_seen(again))
            assert _seen(again)[-2:] == [(edited.id, 2, "updated"), (fresh.id, 1, "created")]

            # Cursors of the new epoch resume as always.
            rest = await take(svc.changes(since=everything[-2].cursor), 1, guard=GUARD_S)
            assert _seen(rest) == [(fresh.id, 1, "created")]
            newer = await svc.memories.add(scope, "later still")
            tail = await take(svc.changes(since=everything[-1].cursor), 1, guard=GUARD_S)
            assert _seen(tail) == [(newer.id, 1, "created")]


async def test_doctor_reports_a_moved_database_and_repair_starts_the_new_epoch(
    settings: Settings, scope: Scope, other_cluster: Cluster
) -> None:
    async with MemoryService.open(settings) as svc:
        await svc.memories.add(scope, "before the move")
        report = await svc.maintenance.doctor()
        (epoch,) = [c for c in report.checks if c.name == "change feed epoch"]
        assert epoch.status == "ok"

    async with contextlib.aclosing(_restored(settings, other_cluster)) as moves:
        moved = await anext(moves)
        async with MemoryService.open(moved) as svc:
            report = await svc.maintenance.doctor()
            (epoch,) = [c for c in report.checks if c.name == "change feed epoch"]
            assert epoch.status == "warning"
            assert "another PostgreSQL cluster" in epoch.detail
            assert "memsvc doctor --repair" in epoch.detail

            repaired = await svc.maintenance.doctor(repair=True)
            (epoch,) = [c for c in repaired.checks if c.name == "change feed epoch"]
            assert epoch.status == "repaired"
            assert any("epoch 2" in fix for fix in epoch.fixes)

            again = await svc.maintenance.doctor()
            (epoch,) = [c for c in again.checks if c.name == "change feed epoch"]
            assert epoch.status == "ok" and "epoch 2" in epoch.detail


async def test_a_feed_whose_database_moves_under_it_raises_instead_of_skipping(
    settings: Settings, scope: Scope
) -> None:
    """The check runs on every read, not only when a feed starts: a pool may reconnect to
    a restored copy behind the same address. The move is played by editing what the
    epoch recorded of the cluster, as a restored database would find it."""
    async with MemoryService.open(settings) as svc:
        first = await svc.memories.add(scope, "before the move")
        feed = svc.changes()
        async with contextlib.aclosing(feed):
            assert (await asyncio.wait_for(anext(feed), GUARD_S)).entity_id == first.id
            async with svc.pool.acquire() as conn:
                await conn.execute(
                    "UPDATE memsvc.schema_info SET value = jsonb_set(value::jsonb, "
                    "'{system_identifier}', '\"1\"')::text WHERE key = 'change_feed_epoch'"
                )
            await svc.memories.add(scope, "after the move")
            with pytest.raises(FeedEpochError):
                await asyncio.wait_for(anext(feed), GUARD_S)


async def test_cursors_written_before_epochs_existed_still_resume_until_the_database_moves(
    settings: Settings, scope: Scope, other_cluster: Cluster
) -> None:
    async with MemoryService.open(settings) as svc:
        ids = [(await svc.memories.add(scope, f"fact {i}")).id for i in range(3)]
        changes = await take(svc.changes(), 3)
        # The format before epochs: c1.<key>.<source>.<event id>.
        legacy = "c1." + changes[0].cursor.split(".", 2)[2]
        resumed = await take(svc.changes(since=legacy), 2)
        assert [c.entity_id for c in resumed] == ids[1:]

    async with contextlib.aclosing(_restored(settings, other_cluster)) as moves:
        moved = await anext(moves)
        async with MemoryService.open(moved) as svc:
            with pytest.raises(FeedEpochError):
                await take(svc.changes(since=legacy), 1, guard=GUARD_S)


async def test_since_a_time_skips_changes_that_started_before_it(
    service: MemoryService, scope: Scope
) -> None:
    await service.memories.add(scope, "old news")
    await asyncio.sleep(0.05)
    moment = datetime.now().astimezone()
    await asyncio.sleep(0.05)
    new = await service.memories.add(scope, "fresh news")
    changes = await take(service.changes(since=moment), 1)
    assert [c.entity_id for c in changes] == [new.id]


def test_since_a_time_without_a_time_zone_is_rejected(service: MemoryService) -> None:
    with pytest.raises(ValidationError) as raised:
        service.changes(since=datetime(2026, 1, 1))
    assert raised.value.field == "since"


async def test_an_erasure_after_a_restore_erases_what_was_written_before_the_move(
    settings: Settings, scope: Scope, other_cluster: Cluster
) -> None:
    # Erasure takes what committed before it began by the creating transaction's
    # id: ids recorded in the old cluster must not look uncommitted in the new one.
    await _source_ahead(settings, other_cluster)
    async with MemoryService.open(settings) as svc:
        await svc.memories.add(scope, "said before the move")
        await svc.assemblies.create(scope, "before the move")
        await svc.checkpoints.create(scope, {"step": 1})

    async with contextlib.aclosing(_restored(settings, other_cluster)) as moves:
        moved = await anext(moves)
        async with MemoryService.open(moved) as svc:
            receipt = await svc.erase(scope)
            assert receipt.verified, receipt.remaining
            assert receipt.removed["memories"] == 1
            assert receipt.removed["assemblies"] == 1
            assert receipt.removed["session_checkpoints"] == 1
            assert await svc.memories.count(scope) == 0
