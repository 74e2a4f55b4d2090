"""As-of reads benchmark: what reading the past costs next to reading the present.

    python -m benchmarks.asof                        # embedded server, ~1 min
    python -m benchmarks.asof --database-url postgresql://... --memories 20000

Fills ``--memories`` memories over 100 sessions of one tenant, updates a
tenth of them and deletes a hundredth, and lets gc persist the commit times
of half of the changes (the rest stay for ``pg_xact_commit_timestamp``),
then vacuums (as autovacuum would).
Then, for one session (~200 memories), p50 latency of:

- ``list(scope, as_of=t)`` (a page of 100), ``count(scope, as_of=t)`` and
  ``get(id, as_of=t)``, with ``t`` before the changes and ``t`` just now;
- raw asyncpg running the same as-of statement (memsvc's own cost);
- the same calls without ``as_of`` (the price of rebuilding the past).

Calls alternate between the compared sides, so drift on a shared machine
hits both alike; absolute times are noise, ratios are not.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import asyncpg

from benchmarks.scratch import scratch_dir
from memsvc import MemoryService, Scope, Settings
from memsvc.db.sql import Params, scope_condition
from memsvc.memories import asof_queries as q

Call = Callable[[], Awaitable[object]]


async def p50_ms(calls: dict[str, Call], rounds: int) -> dict[str, float]:
    """Median latency of each call, the calls interleaved round by round."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            started = time.perf_counter()
            await call()
            times[name].append((time.perf_counter() - started) * 1000)
    return {name: statistics.median(values) for name, values in times.items()}


async def fill(svc: MemoryService, count: int) -> tuple[Scope, list[object], datetime]:
    per = count // 100
    for s in range(100):
        scope = Scope("bench", "p", "a", f"s{s}")
        await svc.memories.add_many(scope, [f"memory {s}/{i}" for i in range(per)])
    scope = Scope("bench", "p", "a", "s7")
    ids = [m.id for m in await svc.memories.list(scope, limit=per)]
    before = datetime.now(UTC)
    all_ids = [m.id for m in await svc.memories.list(Scope("bench"), include="descendants",
                                                     limit=10_000)]
    changed = all_ids[:: 10]
    for n, memory_id in enumerate(changed):
        if n == len(changed) // 2:
            await svc.maintenance.gc()
        if n % 10 == 9:
            await svc.memories.delete(memory_id)
        else:
            await svc.memories.update(memory_id, content=f"changed {n}")
    return scope, ids, before


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", help="PostgreSQL with pgvector (default: embedded)")
    parser.add_argument("--memories", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    if args.database_url:
        settings = Settings(database_url=args.database_url, auto_migrate=True)
    else:
        settings = Settings(data_dir=scratch_dir("memsvc-asof-"), auto_migrate=True)
    async with MemoryService.open(settings) as svc:
        scope, ids, before = await fill(svc, args.memories)
        now = datetime.now(UTC)
        conn = await asyncpg.connect(svc.dsn)
        # Steady state: autovacuum has reclaimed the row versions gc's
        # commit-time copies left behind.
        await conn.execute(f"VACUUM ANALYZE {settings.db_schema}.memory_events")
        memories = svc.memories
        by_id = q.by_ids(settings.db_schema, None)
        target = ids[3]
        print(f"{args.memories} memories, p50 over {args.rounds} rounds (ms)")
        print(f"{'read':34} {'memsvc':>8} {'raw':>8} {'ratio':>6} {'live':>8} {'x live':>7}")
        for label, t in (("t before the changes", before), ("t = now", now)):
            params = Params()
            tenant, moment = params.add(scope.tenant), params.add(t)
            sql = q.in_scope(
                settings.db_schema,
                tenant,
                scope_condition(scope, "exact", params),
                scope_condition(scope, "exact", params, alias="m"),
                moment,
                limit_param=params.add(100),
            )
            result = await p50_ms(
                {
                    "list": lambda t=t: memories.list(scope, as_of=t, limit=100),
                    "list raw": lambda sql=sql, p=params: conn.fetch(sql, *p.values),
                    "list live": lambda: memories.list(scope, limit=100),
                    "count": lambda t=t: memories.count(scope, as_of=t),
                    "count live": lambda: memories.count(scope),
                    "get": lambda t=t: memories.get(target, as_of=t),
                    "get raw": lambda t=t: conn.fetch(by_id, [target], t),
                    "get live": lambda: memories.get(target),
                },
                args.rounds,
            )
            for read in ("list", "count", "get"):
                raw = result.get(f"{read} raw")
                mine, live = result[read], result[f"{read} live"]
                raw_text = f"{raw:8.2f} {raw / mine:6.2f}" if raw else f"{'-':>8} {'-':>6}"
                print(
                    f"{read + ' as_of, ' + label:34} {mine:8.2f} {raw_text} "
                    f"{live:8.2f} {mine / live:7.2f}"
                )
        await conn.close()


if __name__ == "__main__":
    asyncio.run(main())
