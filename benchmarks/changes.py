"""Change feed benchmark: commit-to-delivery latency and the writers' cost of a consumer.

    python -m benchmarks.changes                     # embedded PostgreSQL, ~1 minute
    python -m benchmarks.changes --seconds 3 --rounds 2 --database-url postgresql://...

Ten writer tasks add memories at full speed (``svc.memories.add``, one
transaction each) for ``--seconds``; rounds alternate between no consumer and
one consumer following ``svc.changes(since="now")`` in a process of its own
(its own pool and LISTEN connection), so drift on a shared machine hits both alike.
Reported: writes/s without and with the consumer (target: ratio >= 0.9), and
p50/p99 from a write's commit (the moment ``add`` returned) to its delivery
by the feed, measured in the consumer (it keeps its delivery times until
the round is over, so the writers' process does no work for the
benchmark's bookkeeping while it writes). Also reported: CPU time per write
of the writers' process, of the server (embedded only) and of the consumer,
which shows where a consumer's cost goes. Absolute numbers on a shared
machine are noise; the ratio and the latency's order of magnitude are what
count.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field

import psutil

from benchmarks.scratch import scratch_dir
from memsvc import MemoryService, Scope, Settings
from memsvc.db.embedded import EmbeddedPostgres, running_postmaster_pid

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
    writers: MemoryService, dsn: str | None, seconds: float, server: Cpu | None
) -> Round:
    """One round of writes, with a consumer process following the feed when ``dsn`` is given.

    The consumer is a process of its own, as a cache or an indexer following
    the feed would be. It keeps each change's delivery time (system-wide
    monotonic clock, as the writers' commit times) to itself while the
    writers run, and hands them over only after the round: parsing a line per
    change in the writers' event loop would charge the benchmark's own
    bookkeeping to the writers.
    """
    committed: dict[uuid.UUID, float] = {}
    process = None
    if dsn is not None:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "benchmarks.changes",
            "--consume",
            dsn,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert process.stdout is not None and process.stdin is not None
        await process.stdout.readline()  # "ready": it has fixed "now" and listens
    own_before = _own_cpu()
    server_before = server.seconds() if server is not None else 0.0
    started = time.monotonic()
    written = await write_for(writers, seconds, committed)
    elapsed = time.monotonic() - started
    result = Round(
        rate=written / elapsed,
        writes=written,
        writers_cpu=_own_cpu() - own_before,
        server_cpu=server.seconds() - server_before if server is not None else None,
    )
    if process is not None:
        assert process.stdout is not None and process.stdin is not None
        # The round is over: tell the consumer what was written; it answers
        # once all of it arrived (or after 30 s) with its delivery times.
        process.stdin.write("".join(f"{m.hex}\n" for m in committed).encode())
        process.stdin.close()
        delivered: dict[uuid.UUID, float] = {}
        async for line in process.stdout:
            fields = line.split()
            if fields[0] == b"cpu":
                result.consumer_cpu = float(fields[1])
            else:
                delivered[uuid.UUID(fields[0].decode())] = float(fields[1])
        await process.wait()
        missing = written - len(delivered)
        if missing:
            print(f"  !! {missing} writes not delivered within 30 s")
        result.latencies = [
            max(0.0, delivered[memory_id] - at)
            for memory_id, at in committed.items()
            if memory_id in delivered
        ]
    return result


@dataclass
class Round:
    """What one round measured; CPU times are seconds over the writing part of the round."""

    rate: float
    writes: int
    writers_cpu: float
    server_cpu: float | None
    consumer_cpu: float | None = None
    latencies: list[float] = field(default_factory=list)


class Cpu:
    """CPU time of a local PostgreSQL server: the postmaster, its live children and
    those it reaped (a backend that exits mid-round still counts)."""

    def __init__(self, pid: int) -> None:
        self._postmaster = psutil.Process(pid)

    def seconds(self) -> float:
        own = self._postmaster.cpu_times()
        total = own.user + own.system + own.children_user + own.children_system
        for child in self._postmaster.children():
            with contextlib.suppress(psutil.Error):
                times = child.cpu_times()
                total += times.user + times.system
        return total


def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system


async def consume(dsn: str) -> None:
    """The consumer process: follows the feed, keeping each change's delivery time.

    Prints "ready" once it follows; after reading the ids the round wrote
    (stdin, to its end) and waiting for them, prints ``memory_id time`` for
    each and ``cpu seconds`` (its CPU time from "ready" to the end of the
    writes).
    """
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    delivered: dict[uuid.UUID, float] = {}
    settings = Settings(database_url=dsn, pool_max_size=2)
    async with MemoryService.open(settings) as reader:
        feed = reader.changes(SCOPE, since="now")

        async def follow() -> None:
            async for change in feed:
                delivered[change.memory_id] = time.monotonic()

        following = asyncio.create_task(follow())
        await asyncio.sleep(0.3)  # the first step has fixed "now" and is listening
        print("ready", flush=True)
        cpu_start = _own_cpu()
        first = await stdin.read(1)  # the writes ended
        cpu = _own_cpu() - cpu_start
        pending = [uuid.UUID(line) for line in (first + await stdin.read()).decode().split()]
        deadline = time.monotonic() + 30
        while pending and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            pending = [memory_id for memory_id in pending if memory_id not in delivered]
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await following
    sys.stdout.write("".join(f"{m.hex} {t!r}\n" for m, t in delivered.items()))
    print(f"cpu {cpu!r}", flush=True)


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
    server = None
    dsn = args.database_url
    if dsn is None:
        data_dir = scratch_dir("memsvc-bench-")
        embedded = EmbeddedPostgres(data_dir)
        dsn = embedded.start()
        pid = running_postmaster_pid(data_dir)
        server = Cpu(pid) if pid is not None else None
    settings = Settings(database_url=dsn, auto_migrate=True, pool_max_size=WRITERS)
    writers = await MemoryService.open(settings)
    without: list[Round] = []
    with_consumer: list[Round] = []
    try:
        await write_for(writers, 1.0, {})  # warm up pools and caches
        for _ in range(args.rounds):
            without.append(await one_round(writers, None, args.seconds, server))
            with_consumer.append(await one_round(writers, dsn, args.seconds, server))
    finally:
        await writers.close()
        if embedded is not None:
            embedded.close()
    base = statistics.median(r.rate for r in without)
    followed = statistics.median(r.rate for r in with_consumer)
    rounds = f"{args.rounds} x {args.seconds:g} s rounds"
    print(f"change feed, {WRITERS} writers at full speed, {rounds}")
    print(f"  writes/s without a consumer : {base:8.0f}  (rounds: {_fmt(without)})")
    print(f"  writes/s with a consumer    : {followed:8.0f}  (rounds: {_fmt(with_consumer)})")
    print(f"  ratio of the medians        : {followed / base:8.2f}  (target >= 0.9)")
    paired = [w.rate / wo.rate for w, wo in zip(with_consumer, without, strict=True)]
    print(
        f"  median of per-round ratios  : {statistics.median(paired):8.2f}  "
        f"(each round against the one before it: {_fmt2(paired)})"
    )
    latencies = [latency for r in with_consumer for latency in r.latencies]
    if latencies:
        print(
            f"  commit -> delivery          : p50 {percentile(latencies, 0.5) * 1000:.1f} ms, "
            f"p99 {percentile(latencies, 0.99) * 1000:.1f} ms over {len(latencies)} changes"
        )
    # Where the CPU goes: ms per write, medians of the rounds (with 2 cores,
    # what the consumer's side takes the writers and the server lose).
    print("  CPU ms per write            without   with consumer")
    print(
        f"    writers' process        {_per_write(without, 'writers_cpu')}  "
        f"{_per_write(with_consumer, 'writers_cpu')}"
    )
    if server is not None:
        print(
            f"    PostgreSQL server       {_per_write(without, 'server_cpu')}  "
            f"{_per_write(with_consumer, 'server_cpu')}"
        )
    print(f"    consumer process        {'':7}  {_per_write(with_consumer, 'consumer_cpu')}")


def _per_write(rounds: list[Round], what: str) -> str:
    values = [getattr(r, what) * 1000 / r.writes for r in rounds if getattr(r, what) is not None]
    return f"{statistics.median(values):7.3f}" if values else "      -"


def _fmt2(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def _fmt(rounds: list[Round]) -> str:
    return ", ".join(f"{r.rate:.0f}" for r in rounds)


if __name__ == "__main__":
    asyncio.run(main())
