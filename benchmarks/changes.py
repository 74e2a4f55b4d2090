"""Change feed benchmark: commit-to-delivery latency and the writers' cost of a consumer.

    python -m benchmarks.changes                     # embedded PostgreSQL, ~1 minute
    python -m benchmarks.changes --seconds 3 --rounds 2 --database-url postgresql://...

Ten writer tasks add memories at full speed (``svc.memories.add``, one
transaction each) for ``--seconds``; rounds alternate between no consumer and
one consumer following ``svc.changes(since="now")`` in a process of its own
(its own pool and LISTEN connection), so drift on a shared machine hits both alike.
Reported: writes/s without and with the consumer (target: ratio >= 0.9), and
p50/p99 from a write's commit (the moment ``add`` returned) to its delivery
by the feed. Absolute numbers on a shared machine are noise; the ratio and
the latency's order of magnitude are what count.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
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
    deadline = time.monotonic() + seconds
    counts = [0] * WRITERS

    async def writer(slot: int) -> None:
        while time.monotonic() < deadline:
            m = await svc.memories.add(SCOPE, f"writer {slot} fact {uuid.uuid4().hex}")
            committed[m.id] = time.monotonic()
            counts[slot] += 1

    await asyncio.gather(*(writer(slot) for slot in range(WRITERS)))
    return sum(counts)


async def one_round(
    writers: MemoryService, dsn: str | None, seconds: float
) -> tuple[float, list[float]]:
    """Writes/s of one round, and the commit-to-delivery latencies (s) when a consumer ran.

    The consumer (``dsn`` given) is a process of its own, as a cache or an
    indexer following the feed would be; both sides stamp times with the
    system-wide monotonic clock.
    """
    committed: dict[uuid.UUID, float] = {}
    delivered: dict[uuid.UUID, float] = {}
    process = None
    reading = None
    if dsn is not None:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "benchmarks.changes",
            "--consume",
            dsn,
            stdout=asyncio.subprocess.PIPE,
        )
        assert process.stdout is not None
        await process.stdout.readline()  # "ready": it has fixed "now" and listens

        async def read(stream: asyncio.StreamReader) -> None:
            async for line in stream:
                memory_id, at = line.split()
                delivered[uuid.UUID(memory_id.decode())] = float(at)

        reading = asyncio.create_task(read(process.stdout))
    started = time.monotonic()
    written = await write_for(writers, seconds, committed)
    rate = written / (time.monotonic() - started)
    latencies: list[float] = []
    if process is not None and reading is not None:
        deadline = time.monotonic() + 30
        while len(delivered) < written and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        process.terminate()
        await process.wait()
        await reading
        missing = written - sum(1 for memory_id in committed if memory_id in delivered)
        if missing:
            print(f"  !! {missing} writes not delivered within 30 s")
        latencies = [
            max(0.0, delivered[memory_id] - at)
            for memory_id, at in committed.items()
            if memory_id in delivered
        ]
    return rate, latencies


async def consume(dsn: str) -> None:
    """The consumer process: one line per change, ``memory_id monotonic_time``."""
    settings = Settings(database_url=dsn, pool_max_size=2)
    async with MemoryService.open(settings) as reader:
        feed = reader.changes(SCOPE, since="now")
        first = asyncio.ensure_future(anext(feed))
        await asyncio.sleep(0.3)  # the first step has fixed "now" and is listening
        print("ready", flush=True)
        change = await first
        out = [f"{change.memory_id} {time.monotonic()}"]
        async for change in feed:
            out.append(f"{change.memory_id} {time.monotonic()}")
            if len(out) >= 50:
                print("\n".join(out), flush=True)
                out.clear()
            # Flush the tail of a burst too, without a write per change.
            elif len(out) == 1:
                asyncio.get_running_loop().call_later(0.01, _flush, out)


def _flush(out: list[str]) -> None:
    if out:
        print("\n".join(out), flush=True)
        out.clear()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", help="PostgreSQL with pgvector (default: embedded)")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of one round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each kind")
    parser.add_argument("--consume", metavar="DSN", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.consume:
        await consume(args.consume)
        return

    embedded = None
    dsn = args.database_url
    if dsn is None:
        embedded = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="memsvc-bench-")))
        dsn = embedded.start()
    settings = Settings(database_url=dsn, auto_migrate=True, pool_max_size=WRITERS)
    writers = await MemoryService.open(settings)
    without: list[float] = []
    with_consumer: list[float] = []

    latencies: list[float] = []
    try:
        await write_for(writers, 1.0, {})  # warm up pools and caches
        for _ in range(args.rounds):
            rate, _ = await one_round(writers, None, args.seconds)
            without.append(rate)
            rate, lat = await one_round(writers, dsn, args.seconds)
            with_consumer.append(rate)
            latencies.extend(lat)
    finally:
        await writers.close()
        if embedded is not None:
            embedded.close()
    base = statistics.median(without)
    followed = statistics.median(with_consumer)
    rounds = f"{args.rounds} x {args.seconds:g} s rounds"
    print(f"change feed, {WRITERS} writers at full speed, {rounds}")
    print(f"  writes/s without a consumer : {base:8.0f}  (rounds: {_fmt(without)})")
    print(f"  writes/s with a consumer    : {followed:8.0f}  (rounds: {_fmt(with_consumer)})")
    print(f"  ratio of the medians        : {followed / base:8.2f}  (target >= 0.9)")
    paired = [w / wo for w, wo in zip(with_consumer, without, strict=True)]
    print(
        f"  median of per-round ratios  : {statistics.median(paired):8.2f}  "
        f"(each round against the one before it: {_fmt2(paired)})"
    )
    if latencies:
        print(
            f"  commit -> delivery          : p50 {percentile(latencies, 0.5) * 1000:.1f} ms, "
            f"p99 {percentile(latencies, 0.99) * 1000:.1f} ms over {len(latencies)} changes"
        )


def _fmt2(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def _fmt(values: list[float]) -> str:
    return ", ".join(f"{v:.0f}" for v in values)


if __name__ == "__main__":
    asyncio.run(main())
