"""Helpers of the change feed tests: collect changes, read the ledgers directly."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg

from memsvc import Change

# Not a timed assertion: a guard so a feed that never delivers fails the test
# instead of hanging the suite.
GUARD_S = 60


async def take(feed: AsyncIterator[Change], n: int, guard: float = GUARD_S) -> list[Change]:
    """The next ``n`` changes of a feed; closes it afterwards."""
    out: list[Change] = []

    async def run() -> None:
        async with contextlib.aclosing(feed) as changes:  # type: ignore[type-var]
            async for change in changes:
                out.append(change)
                if len(out) == n:
                    return

    await asyncio.wait_for(run(), guard)
    return out


async def committed_events(dsn: str) -> list[tuple[str, uuid.UUID, int, str]]:
    """Every event in both ledgers: (entity, id, version, kind)."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT 'memory' AS entity, memory_id AS id, version, kind FROM memsvc.memory_events "
            "UNION ALL SELECT entity, entity_id, version, kind FROM memsvc.entity_events"
        )
    finally:
        await conn.close()
    return [(r["entity"], r["id"], r["version"], r["kind"]) for r in rows]


def assert_exactly_once_in_order(
    delivered: list[Any], expected: list[tuple[str, uuid.UUID, int, str]]
) -> None:
    """Every expected event delivered once, and each entity's versions never going back."""
    got = [(c.entity, c.entity_id, c.version, c.kind) for c in delivered]
    assert sorted(got, key=str) == sorted(expected, key=str)
    last: dict[tuple[str, uuid.UUID], int] = {}
    for entity, entity_id, version, _ in got:
        assert version >= last.get((entity, entity_id), 0), (entity, entity_id, version)
        last[(entity, entity_id)] = version


async def write_workload(service: Any, scope: Any, seed: int, ops: int) -> None:
    """Adds, updates, deletes and checkpoints, some inside transactions held open a
    little while other writers commit (so commits come out of start order)."""
    import random

    from memsvc import NotFoundError

    rng = random.Random(seed)
    live: list[uuid.UUID] = []
    for i in range(ops):
        r = rng.random()
        if r < 0.2:
            async with service.pool.acquire() as conn, conn.transaction():
                live.append((await service.memories.add(scope, f"slow {seed}-{i}", conn=conn)).id)
                await asyncio.sleep(rng.uniform(0.005, 0.04))
        elif r < 0.55 or not live:
            live.append((await service.memories.add(scope, f"fact {seed}-{i}")).id)
        elif r < 0.8:
            with contextlib.suppress(NotFoundError):
                await service.memories.update(rng.choice(live), content=f"edit {seed}-{i}")
        elif r < 0.9:
            await service.memories.delete(live.pop(rng.randrange(len(live))))
        else:
            await service.checkpoints.create(scope, {"i": i}, description=f"cp {seed}-{i}")
