"""Where a plain vector search's client time goes, step by step, against raw SQL.

    python -m benchmarks.search_overhead              # embeddings-small, 3 rounds
    python -m benchmarks.search_overhead --rounds 6

``benchmarks.memories`` measures the whole call against raw SQL; this one runs
variants of memsvc's path that each leave one more part out, down to
memsvc's statement on a connection held throughout, and prints each one's
wall p50 (and its ratio to raw SQL) and the client's CPU time per call.
The differences between neighbouring rows are what those parts cost.

The variants call memsvc's internals (the undecorated method, the search
planner, the pool's take and return): a diagnostic for whoever works on the
fixed cost, not an API. Every query runs raw SQL and each variant once, in
an order shuffled per query. A fixed order misleads: whatever runs right
after raw SQL finds its own code cold, which alone cost 0.02 ms a call here.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.memories import (
    DEFAULT_DATA,
    add_corpus,
    bytes_connection,
    generated_corpus,
    raw_search_sql,
    real_corpus,
)
from benchmarks.scratch import scratch_dir
from memsvc import MemoryService, Scope, Settings
from memsvc.core.models import SearchHit
from memsvc.db.codecs import vector_bytes
from memsvc.db.embedded import EmbeddedPostgres
from memsvc.memories.queries import MEMORY_COLUMNS_NO_EMBEDDING
from memsvc.memories.repository import MemoryRepository

Variant = Callable[[Scope, np.ndarray], Awaitable[Any]]

RAW_SQL = raw_search_sql(MEMORY_COLUMNS_NO_EMBEDDING)


def variants(svc: MemoryService, held: Any) -> dict[str, Variant]:
    """memsvc's search path, each variant leaving one more part out."""
    repository = svc.memories
    pool = repository._pool
    undecorated = MemoryRepository.search
    while hasattr(undecorated, "__wrapped__"):
        undecorated = undecorated.__wrapped__

    def statement(scope: Scope, query: np.ndarray) -> Awaitable[Any]:
        # The plain search's plan (its statement from the one cache), as search() makes it.
        return repository._planner.plan(
            scope,
            query,
            10,
            "exact",
            None,
            None,
            None,
            None,
            "similarity",
            None,
            None,
            None,
            "auto",
            False,
        )

    async def pooled(scope: Scope, query: np.ndarray, *, hits: bool) -> Any:
        built = await statement(scope, query)
        # As the repository takes one (the pool's public acquire and release).
        conn = await pool.acquire()
        try:
            rows = await conn.fetch(built.statement.sql, *built.values)
            conn.mark_clean()
        finally:
            await pool.release(conn)
        return SearchHit.vector_hits(rows, built.hit_scope) if hits else rows

    async def on_held(scope: Scope, query: np.ndarray) -> Any:
        built = await statement(scope, query)
        return await held.fetch(built.statement.sql, *built.values)

    return {
        "search()": lambda scope, query: repository.search(scope, query, k=10),
        "without telemetry/tenancy wrappers": lambda scope, query: undecorated(
            repository, scope, query, k=10
        ),
        "statement + pool + fetch + hits": lambda scope, query: pooled(scope, query, hits=True),
        "statement + pool + fetch": lambda scope, query: pooled(scope, query, hits=False),
        "statement + fetch, held connection": on_held,
    }


async def measure(dsn: str, data: dict[str, np.ndarray], rounds: int) -> None:
    settings = Settings(database_url=dsn, auto_migrate=True, pool_max_size=4)
    svc = await MemoryService.open(settings)
    raw = await bytes_connection(
        dsn,
        {"hnsw.ef_search": str(settings.hnsw_ef_search), "hnsw.iterative_scan": "relaxed_order"},
    )
    held = None
    try:
        # A benchmark's database, as benchmarks.memories assumes: emptied first.
        await raw.execute("TRUNCATE memsvc.memories, memsvc.memory_events CASCADE")
        await add_corpus(svc, data)
        await raw.execute("ANALYZE memsvc.memories")
        # A connection of memsvc's pool (its codecs and settings), held for the run.
        held = await svc.memories._pool.acquire()
        steps = variants(svc, held)

        async def raw_sql(scope: Scope, query: np.ndarray) -> Any:
            return await raw.fetch(RAW_SQL, vector_bytes(query), scope.tenant, scope.project)

        calls: dict[str, Variant] = {"raw SQL": raw_sql, **steps}
        wall: dict[str, list[float]] = {name: [] for name in calls}
        cpu: dict[str, list[float]] = {name: [] for name in calls}
        shuffler = random.Random(7)
        names = list(calls)
        queries = list(zip(data["queries"], data["query_scopes"], strict=True))
        for _ in range(rounds):
            for query, scope_id in queries:
                scope = Scope("bench", f"s{int(scope_id)}")
                shuffler.shuffle(names)
                for name in names:
                    started, started_cpu = time.perf_counter(), time.thread_time()
                    await calls[name](scope, query)
                    cpu[name].append(time.thread_time() - started_cpu)
                    wall[name].append(time.perf_counter() - started)
        report(wall, cpu, len(queries), rounds)
    finally:
        if held is not None:
            await svc.memories._pool.release(held)
        await raw.close()
        await svc.close()


def report(
    wall: dict[str, list[float]], cpu: dict[str, list[float]], queries: int, rounds: int
) -> None:
    raw_p50 = statistics.median(wall["raw SQL"])
    raw_cpu = statistics.mean(cpu["raw SQL"])
    print(f"plain vector search, k=10: {queries} queries x {rounds} rounds, order shuffled")
    print(f"  {'variant':<38} {'p50 ms':>7} {'x raw':>6} {'cpu ms':>7} {'cpu - raw':>9}")
    for name in wall:
        p50, mean_cpu = statistics.median(wall[name]), statistics.mean(cpu[name])
        print(
            f"  {name:<38} {p50 * 1000:7.3f} {p50 / raw_p50:6.2f} {mean_cpu * 1000:7.3f} "
            f"{(mean_cpu - raw_cpu) * 1000:+9.3f}"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", help="PostgreSQL with pgvector (default: embedded)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="embeddings-small dir")
    parser.add_argument("--rounds", type=int, default=3, help="passes over the queries")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if (args.data / "vectors.f16.npy").exists():
        data = real_corpus(args.data)
    else:
        print(f"({args.data} not found: generated vectors instead)")
        data = generated_corpus(20_000, 150)
    if args.database_url:
        await measure(args.database_url, data, args.rounds)
        return
    embedded = EmbeddedPostgres(scratch_dir("memsvc-bench-"))
    try:
        await measure(embedded.start(), data, args.rounds)
    finally:
        embedded.close()


if __name__ == "__main__":
    asyncio.run(main())
