"""Working-memory benchmark: memsvc's stores against raw redis-py, same server, same run.

    python -m benchmarks.working                       # a private redis-server, ~30 s
    python -m benchmarks.working --redis-url redis://127.0.0.1:6380/0 --seconds 2

For ``set``, ``get`` and ``append_scratchpad``, single client and 10
concurrent asyncio tasks, it reports ops/s of:

- raw redis-py doing the same work by hand: ``json.dumps`` + ``SET .. PX``,
  ``GET`` + ``json.loads``, and a non-transactional pipeline ``RPUSH`` +
  ``LTRIM`` (one round trip per call, like memsvc's one script per call),
  through the same pool class and settings memsvc uses;
- ``WorkingMemory`` on ``RedisStore`` (target: >= 0.8x raw redis-py);
- ``WorkingMemory`` on ``LocalStore`` (target: >= 100,000 get/set per second).

Raw and memsvc runs alternate over several rounds so that drift on a shared
machine hits both sides alike; absolute numbers are noise, ratios are not.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from redis.asyncio import BlockingConnectionPool, Redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.testing.redis import RedisServer
from memsvc.working import LocalStore, RedisStore, WorkingMemory

Op = Callable[[int], Awaitable[object]]
OPS = ("set", "get", "append_scratchpad")
MODES = {"1 client": 1, "10 tasks": 10}
VALUE = {"step": 3, "note": "checked the span table", "items": [1, 2, 3]}
SCOPE = Scope("bench", "proj", "agent", "session-1")


@dataclass
class Row:
    op: str
    mode: str
    raw: float
    redis: float
    ratio: float
    local: float
    raw_server_us: float | None
    redis_server_us: float | None


async def measure(op: Op, tasks: int, seconds: float) -> tuple[float, int]:
    """Ops/s and op count of ``tasks`` concurrent loops calling ``op`` until the deadline."""
    deadline = time.perf_counter() + seconds
    counts = [0] * tasks

    async def loop(slot: int) -> None:
        i = 0
        while time.perf_counter() < deadline:
            # Batches keep the clock reads out of the in-process measurements.
            for _ in range(20):
                await op(i)
                i += 1
        counts[slot] = i

    started = time.perf_counter()
    await asyncio.gather(*(loop(slot) for slot in range(tasks)))
    return sum(counts) / (time.perf_counter() - started), sum(counts)


async def server_time(client: Redis, op: Op, tasks: int, seconds: float) -> tuple[float, float]:
    """Ops/s, and Redis CPU time per op in microseconds (from INFO commandstats)."""
    await client.config_resetstat()
    rate, count = await measure(op, tasks, seconds)
    stats = await client.info("commandstats")
    used = sum(
        float(entry["usec"])
        for name, entry in stats.items()
        if name.startswith("cmdstat_") and name not in {"cmdstat_config", "cmdstat_info"}
    )
    return rate, used / max(count, 1)


def raw_ops(client: Redis, settings: Settings) -> dict[str, Op]:
    """The same work as WorkingMemory, written by hand with redis-py."""
    ttl_ms = (settings.working_memory_default_ttl_seconds or 86_400) * 1000
    limit = settings.scratchpad_max_entries

    async def set_(i: int) -> object:
        return await client.set("raw:k", json.dumps({**VALUE, "step": i}), px=ttl_ms)

    async def get(i: int) -> object:
        text = await client.get("raw:k")
        return None if text is None else json.loads(text)

    async def append(i: int) -> object:
        entry = json.dumps({"content": f"note {i}", "timestamp": "2025-01-01T00:00:00+00:00"})
        pipe = client.pipeline(transaction=False)
        pipe.rpush("raw:pad", entry)
        pipe.ltrim("raw:pad", -limit, -1)
        return await pipe.execute()

    return {"set": set_, "get": get, "append_scratchpad": append}


def memory_ops(memory: WorkingMemory) -> dict[str, Op]:
    async def set_(i: int) -> object:
        await memory.set("k", {**VALUE, "step": i})
        return None

    async def get(i: int) -> object:
        return await memory.get("k")

    async def append(i: int) -> object:
        await memory.append_scratchpad(f"note {i}")
        return None

    return {"set": set_, "get": get, "append_scratchpad": append}


async def run(url: str, seconds: float, rounds: int) -> list[Row]:
    settings = Settings(redis_url=url)
    timeout = settings.redis_timeout_s
    # Same pool class and options as RedisStore.from_url.
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=settings.redis_max_connections,
        timeout=timeout * 5,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        decode_responses=True,
    )
    raw_client = Redis(connection_pool=pool)
    redis_store = RedisStore.from_url(url, settings)
    local_store = LocalStore(settings)
    raw = raw_ops(raw_client, settings)
    on_redis = memory_ops(WorkingMemory(SCOPE, redis_store, settings))
    on_local = memory_ops(WorkingMemory(SCOPE, local_store, settings))
    await raw_client.flushdb()
    for ops in (raw, on_redis, on_local):  # warm up connections, scripts, caches
        for name in OPS:
            await measure(ops[name], 10, 0.2)

    rows: list[Row] = []
    for name in OPS:
        for mode, tasks in MODES.items():
            raw_rates, redis_rates, ratios, local_rates = [], [], [], []
            raw_us, redis_us = [], []
            # Raw and memsvc alternate in short rounds; the median ratio of
            # back-to-back pairs resists the drift of a shared machine.
            for _ in range(rounds):
                raw_rate, raw_cost = await server_time(raw_client, raw[name], tasks, seconds)
                redis_rate, redis_cost = await server_time(
                    raw_client, on_redis[name], tasks, seconds
                )
                local_rate, _ = await measure(on_local[name], tasks, seconds / 2)
                raw_rates.append(raw_rate)
                redis_rates.append(redis_rate)
                ratios.append(redis_rate / raw_rate)
                local_rates.append(local_rate)
                raw_us.append(raw_cost)
                redis_us.append(redis_cost)
            rows.append(
                Row(
                    name,
                    mode,
                    statistics.median(raw_rates),
                    statistics.median(redis_rates),
                    statistics.median(ratios),
                    statistics.median(local_rates),
                    statistics.median(raw_us),
                    statistics.median(redis_us),
                )
            )
    await redis_store.close()
    await raw_client.aclose()
    await pool.aclose()
    return rows


def report(rows: list[Row]) -> str:
    header = (
        f"{'operation':<18} {'mode':<9} {'raw redis-py':>13} {'RedisStore':>11} "
        f"{'ratio':>6} {'LocalStore':>11}   {'Redis CPU us/op raw / memsvc':>28}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(
            f"{row.op:<18} {row.mode:<9} {row.raw:>13,.0f} {row.redis:>11,.0f} "
            f"{row.ratio:>5.2f}x {row.local:>11,.0f}   "
            f"{row.raw_server_us:>16.1f} / {row.redis_server_us:<9.1f}"
        )
    lines.append("")
    lines.append(
        "ops/s (medians of alternating rounds; ratio = median of paired rounds); "
        "targets: RedisStore >= 0.80x raw redis-py, LocalStore >= 100,000 get/set"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-url", help="use this server (flushed!), not a private one")
    parser.add_argument("--seconds", type=float, default=0.3, help="per measurement (default 0.3)")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds (default 7)")
    args = parser.parse_args()
    if args.redis_url:
        rows = asyncio.run(run(args.redis_url, args.seconds, args.rounds))
    else:
        with RedisServer() as server:
            rows = asyncio.run(run(server.url, args.seconds, args.rounds))
    print(report(rows))


if __name__ == "__main__":
    main()
