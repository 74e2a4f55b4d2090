"""Online embedding-model migration: what it costs the app while it runs.

    python -m benchmarks.reembed                  # embedded PostgreSQL, 5,000 rows, ~1 min
    python -m benchmarks.reembed --rows 20000 --database-url postgresql://...

On one store of ``--rows`` memories (hashing embedder, 384 -> 256
dimensions), in one run, it reports:

- search (vector mode, k=10, a precomputed query) and single ``add`` p50
  latency: raw asyncpg running the same nearest-neighbour statement, memsvc
  with no migration, and, once the fill is done, raw asyncpg again and memsvc
  while the migration is in progress (writes embed with both models and, like
  searches, hold the migration's row in a transaction);
- the fill rate of one worker (rows embedded and stored per second);
- the switch: how long ``reembed`` took from the end of the fill to its
  return, and the longest search seen while it switched (the switch holds an
  exclusive lock on memories for its last step).

Absolute times on a shared machine are noise; the ratios are what count.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

import asyncpg
import numpy as np

from benchmarks.scratch import scratch_dir
from memsvc import MemoryService, Scope, Settings
from memsvc.db.embedded import EmbeddedPostgres
from memsvc.embedding import HashingEmbedder
from memsvc.ops.reembed import Reembedder

SCHEMA = "memsvc_reembed_bench"
OLD_DIM, NEW_DIM = 384, 256
SCOPE = Scope("bench", "proj", "agent")


async def p50_ms(op: Callable[[int], Awaitable[object]], count: int) -> float:
    """Median latency of ``count`` sequential calls, in milliseconds."""
    times = []
    for i in range(count):
        started = time.perf_counter()
        await op(i)
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", help="PostgreSQL with pgvector (default: embedded)")
    parser.add_argument("--rows", type=int, default=5000, help="memories in the store")
    parser.add_argument("--ops", type=int, default=200, help="timed calls per measurement")
    parser.add_argument("--batch-size", type=int, default=200, help="reembed batch size")
    args = parser.parse_args()

    embedded = None
    dsn = args.database_url
    if dsn is None:
        embedded = EmbeddedPostgres(scratch_dir("memsvc-bench-"))
        dsn = embedded.start()
    admin = await asyncpg.connect(dsn)
    await admin.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    settings = Settings(
        database_url=dsn,
        auto_migrate=True,
        db_schema=SCHEMA,
        pool_max_size=4,
        embedding_state_refresh_s=0.5,
    )
    old, new = HashingEmbedder(OLD_DIM), HashingEmbedder(NEW_DIM)
    rng = np.random.default_rng(7)
    try:
        async with MemoryService.open(settings, embedder=old, next_embedder=new) as svc:
            texts = [f"note {i} on topic{i % 97} word{i % 13} item{i}" for i in range(args.rows)]
            for start in range(0, len(texts), 2000):
                await svc.memories.add_many(SCOPE, texts[start : start + 2000])
            queries = [old.embed_one(texts[int(j)]) for j in rng.integers(0, args.rows, 64)]
            raw_sql = (
                f"SELECT id, content, 1 - (embedding <=> $1::vector) AS similarity "
                f"FROM {SCHEMA}.memories WHERE tenant_id = 'bench' AND project_id = 'proj' "
                f"AND agent_id = 'agent' AND session_id IS NULL "
                f"ORDER BY embedding <=> $1::vector LIMIT 10"
            )

            async def raw_search(i: int) -> object:
                vector = "[" + ",".join(f"{x:.6f}" for x in queries[i % len(queries)]) + "]"
                return await admin.fetch(raw_sql, vector)

            async def search(i: int) -> object:
                return await svc.memories.search(SCOPE, queries[i % len(queries)], k=10)

            def adder(tag: str) -> Callable[[int], Awaitable[object]]:
                async def add(i: int) -> object:
                    return await svc.memories.add(SCOPE, f"{tag} write {i} about topic{i % 97}")

                return add

            raw_ms = await p50_ms(raw_search, args.ops)
            before_ms = await p50_ms(search, args.ops)
            add_before_ms = await p50_ms(adder("before"), args.ops)

            worker = Reembedder(
                svc.pool, settings, dsn, new, spec="hashing", dim=NEW_DIM,
                batch_size=args.batch_size,
            )  # fmt: skip
            report = await worker._start()
            await svc.embedding_space.refresh(svc.pool)
            started = time.perf_counter()
            await worker._fill(report)
            fill_s = time.perf_counter() - started
            # The fill left a dead version of every row (and its index
            # entries): raw asyncpg pays for them too, measured again here.
            raw_during_ms = await p50_ms(raw_search, args.ops)
            during_ms = await p50_ms(search, args.ops)
            # The same searches on the same table without the migration's
            # guard (the service made to forget the migration for a moment):
            # what the guard's transaction and row lock cost.
            space = svc.embedding_space
            known, space.migration = space.migration, None
            space._checked = float("inf")
            unguarded_ms = await p50_ms(search, args.ops)
            space.migration, space._checked = known, float("-inf")
            add_during_ms = await p50_ms(adder("during"), args.ops)

            worst = 0.0
            done = asyncio.Event()

            async def probe() -> None:
                nonlocal worst
                i = 0
                while not done.is_set():
                    t = time.perf_counter()
                    await svc.memories.search(SCOPE, texts[i % len(texts)], k=10, mode="vector")
                    worst = max(worst, time.perf_counter() - t)
                    i += 1

            prober = asyncio.create_task(probe())
            started = time.perf_counter()
            final = await worker.run()
            switch_s = time.perf_counter() - started
            done.set()
            await prober
    finally:
        await admin.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        await admin.close()
        if embedded is not None:
            embedded.close()

    rows = report.embedded
    print(f"rows: {args.rows:,} (+{2 * args.ops} added), batch {args.batch_size}")
    print(f"{'':34} {'p50 ms':>8} {'x raw':>7}")
    for name, ms, raw in (
        ("raw asyncpg search", raw_ms, raw_ms),
        ("memsvc search, no migration", before_ms, raw_ms),
        ("raw asyncpg search, after the fill", raw_during_ms, raw_during_ms),
        ("memsvc search, migration running", during_ms, raw_during_ms),
        ("  the same without the guard", unguarded_ms, raw_during_ms),
    ):
        print(f"{name:34} {ms:8.2f} {raw / ms:7.2f}")
    print(f"{'memsvc add, no migration':34} {add_before_ms:8.2f}")
    print(
        f"{'memsvc add, migration running':34} {add_during_ms:8.2f}   "
        f"({add_during_ms / add_before_ms:.2f}x the add without)"
    )
    print(f"fill: {rows:,} rows in {fill_s:.2f} s = {rows / fill_s:,.0f} rows/s (one worker)")
    print(
        f"index + switch: {switch_s:.2f} s (includes the 2 x refresh wait); "
        f"{final.caught_up} rows embedded at the switch; "
        f"longest search meanwhile {1000 * worst:.1f} ms"
    )


if __name__ == "__main__":
    asyncio.run(main())
