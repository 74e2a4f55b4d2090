"""Search modes benchmark: vector, text and hybrid latency, and text against raw SQL.

    python -m benchmarks.search_modes                      # 20,000 rows, a 5,000-row scope
    python -m benchmarks.search_modes --rows 100000 --scope-rows 10000
    python -m benchmarks.search_modes --database-url postgresql://...

Fills one memsvc schema with generated notes (a vocabulary of words plus
ticket ids, versions and snake_case settings) embedded by the hashing
embedder, then measures k=10 searches in one scope, interleaved, and prints
p50/p99 per mode with the ratios the targets speak of: hybrid p50 / vector
p50 (target <= 2.0) and text p50 / raw asyncpg running the same
``websearch_to_tsquery`` + ``ts_rank_cd`` statement on the same table
(target <= 1.3). Absolute times on a shared machine are noise; the ratios,
measured in the same run, are the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np

from memsvc import MemoryService, Scope, Settings
from memsvc.db.embedded import EmbeddedPostgres
from memsvc.embedding import HashingEmbedder
from memsvc.repositories.memory_queries import MEMORY_COLUMNS, NOT_EXPIRED

WORDS = (
    "deploy rollback budget invoice cache latency replica schema migration ticket "
    "retry timeout kettle meeting review release branch incident pager queue worker "
    "billing ledger token session cluster node volume backup restore search index"
).split()


def note(rng: np.random.Generator, i: int) -> str:
    words = list(rng.choice(WORDS, size=8))
    words.insert(int(rng.integers(0, 8)), f"ENG-{i % 5000}")
    if i % 3 == 0:
        words.append(f"v{i % 7}.{i % 11}.{i % 13}")
    if i % 5 == 0:
        words.append(f"{rng.choice(WORDS)}_{rng.choice(WORDS)}_ms")
    return " ".join(words) + f" #{i}"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def fill(service: MemoryService, rows: int, scope_rows: int, seed: int) -> Scope:
    rng = np.random.default_rng(seed)
    target = Scope("bench", "big")
    others = rows - scope_rows
    batch = 2_000
    # The rest spread over 50 scopes, then the searched scope's own rows.
    for start in range(0, rows, batch):
        end = min(rows, start + batch, others if start < others else rows)
        where = target if start >= others else Scope("bench", f"p{(start // batch) % 50}")
        await service.memories.add_many(where, [note(rng, n) for n in range(start, end)])
        if end < min(rows, start + batch):  # the boundary fell inside this batch
            rest = [note(rng, n) for n in range(end, min(rows, start + batch))]
            await service.memories.add_many(target, rest)
    async with service.pool.acquire() as conn:
        await conn.execute(f"ANALYZE {service.settings.db_schema}.memories")
    return target


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await call()
    return (time.perf_counter() - start) * 1000


async def run(dsn: str, rows: int, scope_rows: int, queries: int) -> None:
    settings = Settings(database_url=dsn, auto_migrate=True, db_schema="bench_modes")
    async with MemoryService.open(settings, embedder=HashingEmbedder()) as service:
        async with service.pool.acquire() as conn:
            await conn.execute("TRUNCATE bench_modes.memories, bench_modes.memory_events CASCADE")
        started = time.perf_counter()
        scope = await fill(service, rows, scope_rows, seed=1)
        print(
            f"filled {rows:,} rows ({scope_rows:,} in the searched scope) "
            f"in {time.perf_counter() - started:.0f} s"
        )
        rng = np.random.default_rng(2)
        texts = [f"ENG-{int(rng.integers(0, 5000))} {rng.choice(WORDS)}" for _ in range(queries)]
        vectors = await HashingEmbedder()(texts)
        # memsvc reads "-" inside a word as a space (so ENG-4312 matches however
        # it was split); the raw side gets the same text, so both run one query.
        raw_texts = [text.replace("-", " ") for text in texts]
        raw_sql = f"""
SELECT {MEMORY_COLUMNS}, ts_rank_cd(content_tsv, websearch_to_tsquery('english', $3)) AS rank
FROM bench_modes.memories
WHERE tenant_id = $1 AND project_id = $2 AND agent_id IS NULL AND session_id IS NULL
  AND content_tsv @@ websearch_to_tsquery('english', $3)
  AND {NOT_EXPIRED}
ORDER BY rank DESC, id LIMIT 10"""
        raw = await asyncpg.connect(dsn)
        memories = service.memories
        calls: dict[str, Callable[[int], Awaitable[Any]]] = {
            "vector": lambda n: memories.search(scope, vectors[n], k=10),
            "text": lambda n: memories.search(scope, texts[n], k=10, mode="text"),
            "hybrid": lambda n: memories.search(
                scope, texts[n], k=10, mode="hybrid", query_embedding=vectors[n]
            ),
            "raw text SQL": lambda n: raw.fetch(raw_sql, "bench", "big", raw_texts[n]),
        }
        spent: dict[str, list[float]] = {name: [] for name in calls}
        try:
            for n in range(min(20, queries)):  # warm up caches and statement caches
                for call in calls.values():
                    await call(n)
            for n in range(queries):
                names = list(calls)
                names = names[n % len(names) :] + names[: n % len(names)]  # rotate who goes first
                for name in names:
                    spent[name].append(await timed(lambda name=name, n=n: calls[name](n)))
        finally:
            await raw.close()
        print(f"{queries} queries, k=10, one {scope_rows:,}-row scope of {rows:,} rows")
        print(f"{'search':<14} {'p50 ms':>8} {'p99 ms':>8}")
        for name, values in spent.items():
            print(f"{name:<14} {statistics.median(values):>8.2f} {percentile(values, 99):>8.2f}")
        p50 = {name: statistics.median(values) for name, values in spent.items()}
        print(f"hybrid p50 / vector p50 = {p50['hybrid'] / p50['vector']:.2f} (target <= 2.0)")
        print(f"text p50 / raw SQL p50  = {p50['text'] / p50['raw text SQL']:.2f} (target <= 1.3)")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", help="PostgreSQL with pgvector (default: embedded)")
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--scope-rows", type=int, default=5_000)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    if args.database_url:
        await run(args.database_url, args.rows, args.scope_rows, args.queries)
        return
    with tempfile.TemporaryDirectory(prefix="memsvc-bench-") as data_dir:
        embedded = EmbeddedPostgres(Path(data_dir))
        dsn = await asyncio.to_thread(embedded.start)
        try:
            await run(dsn, args.rows, args.scope_rows, args.queries)
        finally:
            await asyncio.to_thread(embedded.close)


if __name__ == "__main__":
    asyncio.run(main())
