"""Change feed benchmark: commit-to-delivery latency and the writers' cost of a consumer.

    python -m benchmarks.changes                     # embedded PostgreSQL, ~1 minute
    python -m benchmarks.changes --seconds 3 --rounds 2 --database-url postgresql://...

Ten writer tasks add memories at full speed (``svc.memories.add``, one
transaction each) for ``--seconds``; rounds alternate between no consumer and
one consumer following ``svc.changes(since="now")`` on its own service (its
own pool and LISTEN connection), so drift on a shared machine hits both alike.
Reported: writes/s without and with the consumer (target: ratio >= 0.9), and
p50/p99 from a write's commit (the moment ``add`` returned) to its delivery
by the feed. Absolute numbers on a shared machine are noise; the ratio and
the latency's order of magnitude are what count.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from memsvc import MemoryService, Scope, Settings
from memsvc.db.embedded import EmbeddedPostgres

WRITERS = 10
SCOPE = Scope("bench", "feed", "writer")


async def write_for(svc: MemoryService, seconds: float, committed: dict[uuid.UUID, float]) -> int:
    """Ten writers adding memories until the deadline; returns how many were written."""
    deadline = time.perf_counter() + seconds
    counts = [0] * WRITERS

    async def writer(slot: int) -> None:
        while time.perf_counter() < deadline:
            m = await svc.memories.add(SCOPE, f"writer {slot} fact {uuid.uuid4().hex}")
            committed[m.id] = time.perf_counter()
            counts[slot] += 1

    await asyncio.gather(*(writer(slot) for slot in range(WRITERS)))
    return sum(counts)


async def one_round(
    writers: MemoryService, reader: MemoryService | None, seconds: float
) -> tuple[float, list[float]]:
    """Writes/s of one round, and the commit-to-delivery latencies (s) when a consumer ran."""
    committed: dict[uuid.UUID, float] = {}
    delivered: dict[uuid.UUID, float] = {}
    consumer = None
    if reader is not None:
        ready = asyncio.Event()

        async def consume() -> None:
            feed = reader.changes(SCOPE, since="now")
            async with contextlib.aclosing(feed) as changes:  # type: ignore[type-var]
                first = asyncio.ensure_future(anext(changes))
                ready.set()
                change = await first
                delivered[change.memory_id] = time.perf_counter()
                async for change in changes:
                    delivered[change.memory_id] = time.perf_counter()

        consumer = asyncio.create_task(consume())
        await ready.wait()
        await asyncio.sleep(0.2)  # the consumer has fixed "now" and is listening
    started = time.perf_counter()
    written = await write_for(writers, seconds, committed)
    rate = written / (time.perf_counter() - started)
    latencies: list[float] = []
    if consumer is not None:
        deadline = time.perf_counter() + 30
        while len(delivered) < written and time.perf_counter() < deadline:
            await asyncio.sleep(0.05)
        consumer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await consumer
        missing = written - sum(1 for memory_id in committed if memory_id in delivered)
        if missing:
            print(f"  !! {missing} writes not delivered within 30 s")
        latencies = [
            max(0.0, delivered[memory_id] - at)
            for memory_id, at in committed.items()
            if memory_id in delivered
        ]
    return rate, latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", help="PostgreSQL with pgvector (default: embedded)")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of one round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each kind")
    args = parser.parse_args()

    embedded = None
    dsn = args.database_url
    if dsn is None:
        embedded = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="memsvc-bench-")))
        dsn = embedded.start()
    settings = Settings(database_url=dsn, auto_migrate=True, pool_max_size=WRITERS)
    writers = await MemoryService.open(settings)
    reader = await MemoryService.open(settings.model_copy(update={"pool_max_size": 2}))
    without: list[float] = []
    with_consumer: list[float] = []

    latencies: list[float] = []
    try:
        await write_for(writers, 1.0, {})  # warm up pools and caches
        for _ in range(args.rounds):
            rate, _ = await one_round(writers, None, args.seconds)
            without.append(rate)
            rate, lat = await one_round(writers, reader, args.seconds)
            with_consumer.append(rate)
            latencies.extend(lat)
    finally:
        await reader.close()
        await writers.close()
        if embedded is not None:
            embedded.close()
    base = statistics.median(without)
    followed = statistics.median(with_consumer)
    rounds = f"{args.rounds} x {args.seconds:g} s rounds"
    print(f"change feed, {WRITERS} writers at full speed, {rounds}")
    print(f"  writes/s without a consumer : {base:8.0f}  (rounds: {_fmt(without)})")
    print(f"  writes/s with a consumer    : {followed:8.0f}  (rounds: {_fmt(with_consumer)})")
    print(f"  ratio                       : {followed / base:8.2f}  (target >= 0.9)")
    if latencies:
        print(
            f"  commit -> delivery          : p50 {percentile(latencies, 0.5) * 1000:.1f} ms, "
            f"p99 {percentile(latencies, 0.99) * 1000:.1f} ms over {len(latencies)} changes"
        )


def _fmt(values: list[float]) -> str:
    return ", ".join(f"{v:.0f}" for v in values)


if __name__ == "__main__":
    asyncio.run(main())
