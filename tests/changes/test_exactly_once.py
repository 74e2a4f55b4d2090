"""The feed's guarantee: every committed change exactly once, each entity in version
order, even when transactions commit out of start order and consumers stop anywhere.

Each scenario also runs a naive consumer (``event_id > last seen``) that must
miss events, proving the scenario can see a gap.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sys
import uuid
from pathlib import Path

import asyncpg

from memsvc import Change, MemoryService, Scope
from tests.changes.helpers import (
    GUARD_S,
    assert_exactly_once_in_order,
    committed_events,
    write_workload,
)


async def _naive_reader(dsn: str, seen: list[int], stop: asyncio.Event, last: list[int]) -> None:
    """Reads memory_events by event id after the last one seen (the bug the feed avoids)."""
    conn = await asyncpg.connect(dsn)
    try:
        while True:
            done = stop.is_set()
            rows = await conn.fetch(
                "SELECT event_id FROM memsvc.memory_events WHERE event_id > $1 ORDER BY event_id",
                last[0],
            )
            for row in rows:
                seen.append(row["event_id"])
                last[0] = row["event_id"]
            if done:
                return
            await asyncio.sleep(0.005)
    finally:
        await conn.close()


async def test_out_of_order_commits_reach_the_feed_exactly_once_and_a_naive_cursor_misses_them(
    service: MemoryService, scope: Scope
) -> None:
    rng = random.Random(13)
    delivered: list[Change] = []

    async def consume() -> None:
        async with contextlib.aclosing(service.changes()) as feed:  # type: ignore[type-var]
            async for change in feed:
                delivered.append(change)

    naive_seen: list[int] = []
    naive_last = [0]
    stop = asyncio.Event()
    consumer = asyncio.create_task(consume())
    naive = asyncio.create_task(_naive_reader(service.dsn, naive_seen, stop, naive_last))
    held_event_ids: list[int] = []
    for round_ in range(3):
        # Writers that start first (their events get the lower ids) and hold
        # their transactions open...
        held = []
        for i in range(3):
            conn = await service.pool.acquire()
            tx = conn.transaction()
            await tx.start()
            await service.memories.add(scope, f"held {round_}-{i}", conn=conn)
            held.append((conn, tx))
        # ...while later writers commit.
        fast = [
            await service.memories.add(scope, f"fast {round_}-{i}") for i in range(4)
        ]
        newest = await service.pool.fetchval(
            "SELECT max(event_id) FROM memsvc.memory_events WHERE memory_id = ANY($1::uuid[])",
            [m.id for m in fast],
        )
        # Not a timed assertion: wait until the naive reader has passed the
        # committed events, so the held ones land behind its cursor.
        await asyncio.wait_for(_until(lambda n=newest: naive_last[0] >= n), GUARD_S)
        rng.shuffle(held)
        for conn, tx in held:
            held_event_ids.append(
                await conn.fetchval(
                    "SELECT max(event_id) FROM memsvc.memory_events "
                    "WHERE change_key = pg_current_xact_id()"
                )
            )
            await tx.commit()
            await service.pool.release(conn)
    expected = await committed_events(service.dsn)
    await asyncio.wait_for(_until(lambda: len(delivered) >= len(expected)), GUARD_S)
    stop.set()
    await naive
    consumer.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await consumer

    assert_exactly_once_in_order(delivered, expected)
    missed = set(held_event_ids) - set(naive_seen)
    assert missed == set(held_event_ids)  # the control misses every held event: it can fail


async def _until(condition: object) -> None:
    while not condition():  # type: ignore[operator]
        await asyncio.sleep(0.01)


async def test_a_consumer_cancelled_at_random_points_resumes_exactly_once(
    service: MemoryService, scope: Scope
) -> None:
    rng = random.Random(5)
    processed: list[Change] = []
    cursor: list[str | None] = [None]

    async def consume() -> None:
        feed = service.changes(since=cursor[0])
        async with contextlib.aclosing(feed) as changes:  # type: ignore[type-var]
            async for change in changes:
                # Processing and saving the cursor happen together (no await between).
                processed.append(change)
                cursor[0] = change.cursor

    writers = asyncio.gather(
        *(write_workload(service, scope, seed, 25) for seed in range(3))
    )
    stops = 0
    while not writers.done() or stops < 10:
        task = asyncio.create_task(consume())
        # Stop it anywhere: before its first read, mid-batch, or while it waits.
        await asyncio.wait([task], timeout=rng.uniform(0.0, 0.3))
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        stops += 1
    await writers
    expected = await committed_events(service.dsn)
    task = asyncio.create_task(consume())
    await asyncio.wait_for(_until(lambda: len(processed) >= len(expected)), GUARD_S)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert stops >= 10
    assert_exactly_once_in_order(processed, expected)


CONSUMER = Path(__file__).with_name("consumer_process.py")


async def test_a_sigkilled_consumer_process_resumes_from_its_last_cursor_exactly_once(
    service: MemoryService, scope: Scope, tmp_path: Path
) -> None:
    rng = random.Random(11)
    log = tmp_path / "processed.log"
    log.touch()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}

    async def start() -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            sys.executable, str(CONSUMER), service.dsn, str(log), env=env
        )

    writers = asyncio.gather(
        *(write_workload(service, scope, seed, 30) for seed in range(3))
    )
    kills = 0
    while not writers.done() or kills < 3:
        process = await start()
        await asyncio.sleep(rng.uniform(0.5, 2.5))
        process.send_signal(signal.SIGKILL)
        await process.wait()
        kills += 1
    await writers
    expected = await committed_events(service.dsn)
    process = await start()
    try:
        await asyncio.wait_for(_until(lambda: len(_lines(log)) >= len(expected)), GUARD_S)
    finally:
        process.send_signal(signal.SIGKILL)
        await process.wait()
    records = [line.split(" ") for line in _lines(log)]
    delivered = [
        Change(
            cursor=cursor,
            kind=kind,
            memory_id=uuid.UUID(entity_id),
            scope=scope,
            version=int(version),
            at=None,  # type: ignore[arg-type]
            entity=entity,
        )
        for cursor, entity, entity_id, version, kind in records
    ]
    assert kills >= 3
    assert_exactly_once_in_order(delivered, expected)


def _lines(log: Path) -> list[str]:
    """Complete lines of the consumer's log (a line cut by SIGKILL was never processed)."""
    text = log.read_text()
    return text.split("\n")[:-1]
