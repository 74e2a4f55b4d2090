"""Issue 31, item 8: the change feed delivers every change exactly once on a cluster.

Each node of a cluster hands out its own transaction ids, and they drift
apart. The feed orders events by ``change_key`` (a transaction id) and reads
below a watermark (the oldest running transaction), so keys and watermark
must come from one consistent source. Here the drift is made certain and
large, one way and the other, and each case must still deliver every change
exactly once: a change committed late by a transaction that started early
included (on one server it is held back, never skipped).

On Citus a tenant's feed is exactly once because all of a tenant's rows live
on one node (co-located shards): the keys are that node's transaction ids
(assigned by trigger where the row is written) and the feed's read, routed
there, bounds them with that node's watermark. The control shows what the
single-node design read from the coordinator does on a cluster: it loses the
change committed late. A feed of every tenant would merge several nodes'
keys: it is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable

import asyncpg
import pytest

from memsvc import CitusUnsupportedError, MemoryService, Scope, Settings
from memsvc.testing.citus import CitusCluster
from tests.changes.helpers import take
from tests.citus.helpers import skew_xids

# Not a timed assertion: how long a change may take to arrive before the
# test calls it lost (the feed polls every second without wake-ups).
GUARD_S = 15
SKEW = 5000


Reader = Callable[[list[uuid.UUID]], Awaitable[None]]


async def commit_out_of_order(
    svc: MemoryService, read: Reader, guard_s: float = GUARD_S
) -> tuple[uuid.UUID, uuid.UUID, list[uuid.UUID]]:
    """Two adds of one tenant: the first to start commits last; ``read`` follows meanwhile.

    Waits up to ``guard_s`` after the commit for both to be delivered.
    """
    scope = Scope("acme", "bridge")
    delivered: list[uuid.UUID] = []
    consumer = asyncio.create_task(read(delivered))
    try:
        async with svc.pool.acquire() as held:
            transaction = held.transaction()
            await transaction.start()
            early = await svc.memories.add(scope, "started first", conn=held)
            late = await svc.memories.add(scope, "committed first")
            # Let the consumer read (several polls) while the first is still open.
            await asyncio.sleep(2.5)
            await transaction.commit()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(guard_s):
                while len(delivered) < 2:
                    await asyncio.sleep(0.05)
    finally:
        consumer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await consumer
    return early.id, late.id, delivered


@pytest.mark.parametrize("ahead", ["coordinator", "workers"])
async def test_a_change_committed_late_is_delivered_once_in_order(
    citus_cluster: CitusCluster, citus_service: MemoryService, ahead: str
) -> None:
    await skew_xids(citus_cluster, ahead=ahead, by=SKEW)

    async def feed(delivered: list[uuid.UUID]) -> None:
        async with contextlib.aclosing(citus_service.changes(Scope("acme"))) as changes:  # type: ignore[type-var]
            async for change in changes:
                delivered.append(change.entity_id)

    early, late, delivered = await commit_out_of_order(citus_service, feed)
    assert delivered == [early, late], f"transaction ids {ahead} ahead"


async def test_control_the_single_node_watermark_read_on_the_coordinator_misses_a_change(
    citus_cluster: CitusCluster, citus_service: MemoryService, citus_settings: Settings
) -> None:
    """The naive design on a cluster: the coordinator's watermark over the workers' keys."""
    await skew_xids(citus_cluster, ahead="coordinator", by=SKEW)
    schema = citus_settings.db_schema

    async def naive(delivered: list[uuid.UUID]) -> None:
        conn = await asyncpg.connect(citus_cluster.dsn)
        position = 0
        try:
            while True:
                watermark = await conn.fetchval("SELECT pg_snapshot_xmin(pg_current_snapshot())")
                rows = await conn.fetch(
                    f"SELECT change_key::text AS key, memory_id FROM {schema}.memory_events "
                    "WHERE change_key > $1::text::xid8 AND change_key < $2::xid8 "
                    "ORDER BY change_key",
                    str(position),
                    watermark,
                )
                for row in rows:
                    position = int(row["key"])
                    delivered.append(row["memory_id"])
                await asyncio.sleep(0.2)
        finally:
            await conn.close()

    # The control polls every 0.2 s: had it not lost the change, 3 s would
    # have brought it many times over.
    early, late, delivered = await commit_out_of_order(citus_service, naive, guard_s=3)
    assert delivered == [late], "the control should have lost the change committed late"
    assert early not in delivered


async def test_a_feed_of_every_tenant_is_refused_naming_why(
    citus_service: MemoryService,
) -> None:
    with pytest.raises(CitusUnsupportedError) as refused:
        await take(citus_service.changes(None), 1, GUARD_S)
    assert refused.value.operation == "changes(scope=None)"
    assert "follow one feed per tenant" in str(refused.value)


async def test_a_tenant_feed_since_now_starts_at_its_nodes_watermark(
    citus_cluster: CitusCluster, citus_service: MemoryService
) -> None:
    await skew_xids(citus_cluster, ahead="coordinator", by=SKEW)
    before = await citus_service.memories.add(Scope("acme", "bridge"), "before the feed")
    feed = citus_service.changes(Scope("acme"), since="now")
    first = asyncio.create_task(take(feed, 1, GUARD_S))
    await asyncio.sleep(1.5)  # the feed has started (and read) by now
    after = await citus_service.memories.add(Scope("acme", "bridge"), "after the feed")
    (change,) = await first
    assert change.entity_id == after.id != before.id


@pytest.mark.parametrize("ahead", ["coordinator", "workers"])
async def test_assembly_changes_after_a_cursor_arrive(
    citus_cluster: CitusCluster, citus_service: MemoryService, ahead: str
) -> None:
    await skew_xids(citus_cluster, ahead=ahead, by=SKEW)
    scope = Scope("acme", "bridge")
    assembly = await citus_service.assemblies.create(scope, "units")
    memory = await citus_service.memories.add(scope, "the user prefers metric units")
    seen = await take(citus_service.changes(Scope("acme")), 2, GUARD_S)
    assert [(c.entity, c.kind) for c in seen] == [("assembly", "created"), ("memory", "created")]

    await citus_service.assemblies.add_members(assembly.id, [memory.id], tenant="acme")
    await citus_service.assemblies.delete(assembly.id, tenant="acme")
    try:
        later = await take(citus_service.changes(Scope("acme"), since=seen[-1].cursor), 2, GUARD_S)
    except TimeoutError:
        pytest.fail(f"the assembly's update and delete never arrived ({ahead} ahead)")
    assert [(c.entity_id, c.kind) for c in later] == [
        (assembly.id, "updated"),
        (assembly.id, "deleted"),
    ]
