"""Soak test: bounded open-loop load on a private embedded PostgreSQL, optionally
killed with SIGKILL once in the middle.

Requests are scheduled at a fixed rate whatever the service does (open loop),
and each latency is measured from the request's *scheduled* start, so a stall
shows up in the tail instead of silently slowing the load down (no coordinated
omission). A write that fails is retried with the same client id (idempotent),
like a careful client would. At the end every acknowledged write is looked up:
"rows lost" must be 0.

    python -m benchmarks.soak --seconds 60 --rate 150
    python -m benchmarks.soak --seconds 60 --rate 150 --kill-postgres-at 30
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from memsvc import HashingEmbedder, MemoryService, MemsvcError, Scope, Settings
from memsvc.core.ids import new_id
from memsvc.db import migrate
from memsvc.db.embedded import running_postmaster_pid

_START_SCRIPT = (
    "import sys\n"
    "from memsvc.db.embedded import EmbeddedPostgres\n"
    "print(EmbeddedPostgres(sys.argv[1]).start(keep_running=True))\n"
)
CLIENT_RETRIES = 20
RETRY_PAUSE_S = 0.25


class Histogram:
    """Log-bucketed latency histogram (about 1% relative precision), like HdrHistogram."""

    _BASE = 1.01

    def __init__(self) -> None:
        self._buckets: Counter[int] = Counter()
        self.count = 0
        self.max = 0.0

    def record(self, seconds: float) -> None:
        micros = max(seconds * 1e6, 1.0)
        self._buckets[int(math.log(micros, self._BASE))] += 1
        self.count += 1
        self.max = max(self.max, seconds)

    def percentile(self, p: float) -> float:
        """The latency (seconds) at or under which ``p`` percent of requests completed."""
        if not self.count:
            return 0.0
        rank = math.ceil(self.count * p / 100)
        seen = 0
        for bucket in sorted(self._buckets):
            seen += self._buckets[bucket]
            if seen >= rank:
                return min(self._BASE ** (bucket + 1) / 1e6, self.max)
        return self.max


@dataclass
class Results:
    latency: Histogram = field(default_factory=Histogram)
    by_op: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    retries: int = 0
    acknowledged: dict[uuid.UUID, str] = field(default_factory=dict)
    abandoned: dict[uuid.UUID, str] = field(default_factory=dict)


class PrivatePostgres:
    """An embedded PostgreSQL started by a child process, so this one may SIGKILL it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def start(self) -> str:
        result = subprocess.run(
            [sys.executable, "-c", _START_SCRIPT, str(self.directory)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(f"embedded PostgreSQL did not start:\n{result.stderr[-2000:]}")
        return result.stdout.strip().splitlines()[-1]

    def _signal(self, signum: int) -> None:
        pid = running_postmaster_pid(self.directory)
        if pid is None:
            return
        postmaster = psutil.Process(pid)
        processes = [postmaster, *postmaster.children(recursive=True)]
        os.kill(pid, signum)
        psutil.wait_procs(processes, timeout=60)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def stop(self) -> None:
        self._signal(signal.SIGINT)


async def _write(service: MemoryService, scope: Scope, results: Results, op: str) -> None:
    """An add or put, retried with the same client id until acknowledged (or given up)."""
    memory_id, content = new_id(), f"soak {op} {uuid.uuid4().hex} about metric units"
    for attempt in range(CLIENT_RETRIES + 1):
        try:
            if op == "add":
                await service.memories.add(scope, content, id=memory_id)
                results.acknowledged[memory_id] = content
            else:
                key = f"key-{random.randrange(50)}"
                await service.memories.put(scope, key, content)
            return
        except MemsvcError as exc:
            results.errors[type(exc).__name__] += 1
            if attempt == CLIENT_RETRIES:
                if op == "add":
                    results.abandoned[memory_id] = content
                return
            results.retries += 1
            await asyncio.sleep(RETRY_PAUSE_S)


async def _request(service: MemoryService, scopes: list[Scope], results: Results) -> str:
    scope = random.choice(scopes)
    roll = random.random()
    if roll < 0.40:
        await _write(service, scope, results, "add")
        return "add"
    if roll < 0.50:
        await _write(service, scope, results, "put")
        return "put"
    try:
        if roll < 0.75:
            await service.memories.search(scope, "metric units", k=10)
            return "search"
        working = service.working(scope)
        if roll < 0.88:
            await working.append_scratchpad("checked the span table")
            return "scratchpad"
        await working.set("draft", {"step": random.randrange(100)}, ttl_seconds=600)
        return "working.set"
    except MemsvcError as exc:
        results.errors[type(exc).__name__] += 1
        return "failed-read"


async def run(seconds: float, rate: float, kill_at: float | None, max_in_flight: int) -> int:
    directory = Path(tempfile.mkdtemp(prefix="memsvc-soak-"))
    server = PrivatePostgres(directory)
    try:
        dsn = await asyncio.to_thread(server.start)
        settings = Settings(
            database_url=dsn,
            auto_migrate=False,
            pool_min_size=4,
            pool_max_size=16,
            connect_timeout_s=2.0,
            command_timeout_s=5.0,
            scratchpad_max_entries=10_000,
        )
        await asyncio.to_thread(migrate.upgrade, settings, dsn)
        return await _load(server, settings, seconds, rate, kill_at, max_in_flight)
    finally:
        await asyncio.to_thread(server.stop)
        shutil.rmtree(directory, ignore_errors=True)


async def _load(
    server: PrivatePostgres,
    settings: Settings,
    seconds: float,
    rate: float,
    kill_at: float | None,
    max_in_flight: int,
) -> int:
    results = Results()
    scopes = [Scope(tenant="soak", agent=f"a{i % 4}", session=f"s{i}") for i in range(16)]
    in_flight: set[asyncio.Task[None]] = set()
    shed = 0
    kill_report = ""
    async with MemoryService.open(settings, embedder=HashingEmbedder()) as service:

        async def one(scheduled: float) -> None:
            try:
                op = await _request(service, scopes, results)
            except Exception as exc:  # a raw driver error escaped memsvc: a bug, counted
                op = "untyped-error"
                results.errors[f"UNTYPED {type(exc).__name__}"] += 1
            results.latency.record(time.monotonic() - scheduled)
            results.by_op[op] += 1

        async def killer() -> None:
            nonlocal kill_report
            assert kill_at is not None
            await asyncio.sleep(kill_at)
            began = time.monotonic()
            await asyncio.to_thread(server.kill)
            await asyncio.to_thread(server.start)
            kill_report = (
                f"postgres SIGKILLed at t={kill_at:.0f}s, restarted "
                f"(recovered from WAL) in {time.monotonic() - began:.1f}s"
            )

        kill_task = asyncio.create_task(killer()) if kill_at is not None else None
        start = time.monotonic()
        total = int(seconds * rate)
        for i in range(total):
            scheduled = start + i / rate
            delay = scheduled - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if len(in_flight) >= max_in_flight:
                shed += 1  # the bound of this load generator, reported below
                continue
            task = asyncio.create_task(one(scheduled))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        if in_flight:
            await asyncio.wait(in_flight, timeout=CLIENT_RETRIES * (RETRY_PAUSE_S + 10))
        elapsed = time.monotonic() - start
        if kill_task is not None:
            await kill_task

        lost = await _verify(service, results)

    _print(results, elapsed, total, shed, lost, kill_report)
    return 1 if lost else 0


async def _verify(service: MemoryService, results: Results) -> int:
    """Rows acknowledged but not stored (must be 0); unknown outcomes resolved by retry."""
    ids = list(results.acknowledged)
    found: set[uuid.UUID] = set()
    for start in range(0, len(ids), 1000):
        found.update(m.id for m in await service.memories.get_many(ids[start : start + 1000]))
    for memory_id, content in results.abandoned.items():
        scope_rows = await service.memories.get_many([memory_id])
        if not scope_rows:
            continue
        assert scope_rows[0].content == content
    return len(set(ids) - found)


def _print(
    results: Results, elapsed: float, total: int, shed: int, lost: int, kill_report: str
) -> None:
    h = results.latency
    print(f"requests scheduled   {total} over {elapsed:.1f}s; completed {h.count}; shed {shed}")
    print(f"throughput           {h.count / elapsed:.1f} ops/s")
    print("ops                  " + ", ".join(f"{k}={v}" for k, v in sorted(results.by_op.items())))
    print(
        "latency (from scheduled start)  "
        f"p50={h.percentile(50) * 1000:.1f}ms p95={h.percentile(95) * 1000:.1f}ms "
        f"p99={h.percentile(99) * 1000:.1f}ms max={h.max * 1000:.1f}ms"
    )
    errors = ", ".join(f"{k}={v}" for k, v in sorted(results.errors.items())) or "none"
    print(f"errors by class      {errors}")
    print(
        f"client retries       {results.retries} (same client id; given up: "
        f"{len(results.abandoned)})"
    )
    if kill_report:
        print(f"fault                {kill_report}")
    print(f"acknowledged writes  {len(results.acknowledged)}")
    print(f"rows lost            {lost}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="load duration")
    parser.add_argument("--rate", type=float, default=150.0, help="requests per second")
    parser.add_argument(
        "--kill-postgres-at",
        type=float,
        default=None,
        metavar="SECONDS",
        help="SIGKILL the private PostgreSQL this far in, then restart it",
    )
    parser.add_argument(
        "--max-in-flight",
        type=int,
        default=2000,
        help="bound on concurrent requests (excess is shed and reported)",
    )
    args = parser.parse_args()
    # asyncpg logs every failed reconnect of its pool floor while PostgreSQL is down.
    logging.getLogger("asyncpg.pool").setLevel(logging.CRITICAL)
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(
            asyncio.run(run(args.seconds, args.rate, args.kill_postgres_at, args.max_in_flight))
        )


if __name__ == "__main__":
    main()
