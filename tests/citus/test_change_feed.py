"""Issue 31, item 8: the change feed delivers every change exactly once on a cluster.

Each node of a cluster hands out its own transaction ids, and they drift
apart. The feed orders events by ``change_key`` (a transaction id) and reads
below a watermark (the oldest running transaction), so keys and watermark
must come from one consistent source. Here the drift is made certain and
large, one way and the other, and each case must still deliver every change
exactly once: a change committed late by a transaction that started early
included (on one server it is held back, never skipped).
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from memsvc import Change, MemoryService, Scope
from memsvc.testing.citus import CitusCluster
from tests.changes.helpers import take
from tests.citus.helpers import skew_xids

# Not a timed assertion: how long a change may take to arrive before the
# test calls it lost (the feed polls every second without wake-ups).
GUARD_S = 15
SKEW = 5000


@pytest.mark.parametrize("ahead", ["coordinator", "workers"])
@pytest.mark.parametrize("feed_scope", [Scope("acme"), None], ids=["tenant", "all"])
async def test_a_change_committed_late_is_delivered_once_in_order(
    citus_cluster: CitusCluster,
    citus_service: MemoryService,
    ahead: str,
    feed_scope: Scope | None,
) -> None:
    await skew_xids(citus_cluster, ahead=ahead, by=SKEW)
    scope = Scope("acme", "bridge")
    delivered: list[Change] = []

    async def consume() -> None:
        async with contextlib.aclosing(citus_service.changes(feed_scope)) as feed:  # type: ignore[type-var]
            async for change in feed:
                delivered.append(change)

    consumer = asyncio.create_task(consume())
    try:
        async with citus_service.pool.acquire() as held:
            transaction = held.transaction()
            await transaction.start()
            early = await citus_service.memories.add(scope, "started first", conn=held)
            late = await citus_service.memories.add(scope, "committed first")
            # Let the consumer read (several polls) while the first is still open.
            await asyncio.sleep(2.5)
            await transaction.commit()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(GUARD_S):
                while len(delivered) < 2:
                    await asyncio.sleep(0.05)
    finally:
        consumer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await consumer
    assert [c.entity_id for c in delivered] == [early.id, late.id], (
        f"transaction ids {ahead} ahead: delivered {[c.entity_id for c in delivered]}, "
        f"expected [{early.id}, {late.id}]"
    )


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
