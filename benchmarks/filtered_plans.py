"""Filtered searches run after run on one connection: memsvc against raw asyncpg.

    python -m benchmarks.filtered_plans                  # 10,000-row scope, 3 rounds
    python -m benchmarks.filtered_plans --scope-rows 3000 --rounds 5

A statement asyncpg caches gets a generic plan from its sixth run when
PostgreSQL estimates it no dearer than the custom ones; memsvc prepares a
filtered search for its run alone, so each run is planned for its values.
This measures what each costs: one scope (metadata ``{"b": i % 4}``, so a
filter ``{"b": 1}`` keeps a quarter of it) among other tenants' rows, all
real-looking unit vectors; then, in rounds, memsvc's filtered search and the
same search written as raw SQL on a cached statement (the pool's connection
and a plain asyncpg connection, both holding one statement for many runs),
and raw SQL prepared per run. Printed: p50 per way and the ratios. The
unfiltered search, which keeps asyncpg's cache in memsvc, is shown beside
it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from functools import partial

import asyncpg
import numpy as np

from benchmarks.memories import bytes_connection
from benchmarks.scratch import scratch_dir
from memsvc import MemoryService, Scope, Settings
from memsvc.db.codecs import vector_bytes
from memsvc.db.embedded import EmbeddedPostgres
from tests.test_scope_indexes import fill, vectors

SCOPE = Scope("acme", "filtered")
WHERE = {"b": 1}


def raw_sql(schema: str, filtered: bool) -> str:
    where = " AND metadata @> $3::jsonb" if filtered else " AND $3::jsonb IS NOT NULL"
    return (
        f"SELECT id, content, metadata, embedding <=> $4 AS distance FROM {schema}.memories "
        "WHERE tenant_id = $1 AND project_id = $2 AND agent_id IS NULL AND session_id IS NULL"
        f"{where} AND embedding IS NOT NULL ORDER BY embedding <=> $4 LIMIT 10"
    )


async def timed(call: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await call()
    return (time.perf_counter() - started) * 1000


async def rounds(
    svc: MemoryService,
    raw: asyncpg.Connection,
    sql: str,
    where: dict[str, int] | None,
    queries: np.ndarray,
    count: int,
) -> dict[str, list[float]]:
    """Each query by each way in turn, ``count`` times over: milliseconds per way."""
    times: dict[str, list[float]] = {}
    for _ in range(count):
        for query in queries:
            arguments = (SCOPE.tenant, SCOPE.project, '{"b": 1}', vector_bytes(query))
            ways: dict[str, Callable[[], Awaitable[object]]] = {
                "memsvc": partial(svc.memories.search, SCOPE, query, k=10, where=where),
                "raw, cached statement": partial(raw.fetch, sql, *arguments),
                "raw, prepared per run": partial(prepare_and_fetch, raw, sql, arguments),
            }
            for way, call in ways.items():
                times.setdefault(way, []).append(await timed(call))
    return times


async def prepare_and_fetch(
    raw: asyncpg.Connection, sql: str, arguments: tuple[object, ...]
) -> object:
    statement = await raw.prepare(sql)
    return await statement.fetch(*arguments)


async def run(args: argparse.Namespace) -> None:
    embedded = EmbeddedPostgres(scratch_dir("memsvc-filtered-plans-") / "data")
    dsn = await asyncio.to_thread(embedded.start)
    try:
        await measure(args, dsn)
    finally:
        await asyncio.to_thread(embedded.close)


async def measure(args: argparse.Namespace, dsn: str) -> None:
    # One pooled connection: memsvc's searches share it, as the raw ones share theirs.
    settings = Settings(database_url=dsn, auto_migrate=True, pool_min_size=1, pool_max_size=1)
    async with MemoryService.open(settings) as svc:
        print(f"filling {args.scope_rows:,} rows in the scope, {args.other_rows:,} elsewhere")
        await fill(svc, SCOPE, args.scope_rows, seed=1)
        for n, start in enumerate(range(0, args.other_rows, 5000)):
            await fill(svc, Scope(f"other-{n}", "p"), min(5000, args.other_rows - start), 10 + n)
        async with svc.pool.acquire() as conn:
            await conn.execute(f"ANALYZE {settings.db_schema}.memories")
        raw = await bytes_connection(dsn, {
            "hnsw.ef_search": str(settings.hnsw_ef_search),
            "hnsw.iterative_scan": "relaxed_order",
            "hnsw.max_scan_tuples": str(settings.hnsw_max_scan_tuples),
        })
        queries = vectors(99, args.queries)
        times: dict[str, list[float]] = {}
        for label, where in (("filtered", WHERE), ("unfiltered", None)):
            sql = raw_sql(settings.db_schema, where is not None)
            for way, found in (await rounds(svc, raw, sql, where, queries, args.rounds)).items():
                times[f"{label}: {way}"] = found
        await raw.close()
    print(f"search p50 over {args.rounds} rounds of {args.queries} queries, k=10:")
    for filtered in ("filtered", "unfiltered"):
        mine = statistics.median(times[f"{filtered}: memsvc"])
        for way in ("memsvc", "raw, cached statement", "raw, prepared per run"):
            p50 = statistics.median(times[f"{filtered}: {way}"])
            print(f"  {filtered:10s} {way:24s} {p50:7.2f} ms   memsvc / this {mine / p50:5.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--scope-rows", type=int, default=10_000)
    parser.add_argument("--other-rows", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
