"""Search modes benchmark: vector, text and hybrid latency, and text against raw SQL.

    python -m benchmarks.search_modes                      # 20,000 rows, a 5,000-row scope
    python -m benchmarks.search_modes --rows 100000 --scope-rows 10000
    python -m benchmarks.search_modes --database-url postgresql://...

Fills one memsvc schema with generated notes (a vocabulary of words plus
ticket ids, versions and snake_case settings) embedded by the hashing
embedder, then measures k=10 searches in one scope and prints p50/p99 with
the ratios the targets speak of, each from its own interleaved phase:

- the modes, in turn: hybrid p50 / vector p50 (target <= 2.0);
- text mode against raw asyncpg running the same ``websearch_to_tsquery`` +
  ``ts_rank_cd`` statement on the same table, returning the same columns
  (target <= 1.3): on one connection of its own, and through an asyncpg
  pool as an app would (``async with pool.acquire()``, asyncpg's defaults).

Text and raw SQL are timed apart from the other modes: on a shared 2-core
machine a short statement that runs right after a vector or hybrid search
is slowed down several times, and in turns of four the same side always
follows the same heavy one. Absolute times on a shared machine are noise;
the ratios, measured in the same run, are the figures.
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
from memsvc.memories.queries import MEMORY_COLUMNS_NO_EMBEDDING, NOT_EXPIRED

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


async def interleaved(
    calls: dict[str, Callable[[int], Awaitable[Any]]], queries: int
) -> dict[str, list[float]]:
    """Milliseconds per call of each side, query by query, rotating who goes first."""
    spent: dict[str, list[float]] = {name: [] for name in calls}
    for n in range(min(20, queries)):  # warm up caches and statement caches
        for call in calls.values():
            await call(n)
    for n in range(queries):
        names = list(calls)
        names = names[n % len(names) :] + names[: n % len(names)]
        for name in names:
            spent[name].append(await timed(lambda name=name, n=n: calls[name](n)))
    return spent


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
        # The columns a text hit is built from (memsvc reads no embeddings
        # unless asked), plus the rank.
        raw_sql = f"""
SELECT {MEMORY_COLUMNS_NO_EMBEDDING},
       ts_rank_cd(content_tsv, websearch_to_tsquery('english', $3)) AS rank
FROM bench_modes.memories
WHERE tenant_id = $1 AND project_id = $2 AND agent_id IS NULL AND session_id IS NULL
  AND content_tsv @@ websearch_to_tsquery('english', $3)
  AND {NOT_EXPIRED}
ORDER BY rank DESC, id LIMIT 10"""
        raw = await asyncpg.connect(dsn)
        raw_pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4)

        async def raw_pooled(n: int) -> Any:
            async with raw_pool.acquire() as conn:
                return await conn.fetch(raw_sql, "bench", "big", raw_texts[n])

        memories = service.memories
        modes: dict[str, Callable[[int], Awaitable[Any]]] = {
            "vector": lambda n: memories.search(scope, vectors[n], k=10),
            "text": lambda n: memories.search(scope, texts[n], k=10, mode="text"),
            "hybrid": lambda n: memories.search(
                scope, texts[n], k=10, mode="hybrid", query_embedding=vectors[n]
            ),
        }
        against_raw: dict[str, Callable[[int], Awaitable[Any]]] = {
            "text": modes["text"],
            "raw SQL, conn": lambda n: raw.fetch(raw_sql, "bench", "big", raw_texts[n]),
            "raw SQL, pool": raw_pooled,
        }
        try:
            spent = await interleaved(modes, queries)
            versus = await interleaved(against_raw, queries)
            agree = 0
            for n in range(queries):
                hits = await modes["text"](n)
                raw_rows = await against_raw["raw SQL, conn"](n)
                agree += [h.memory.id for h in hits] == [r["id"] for r in raw_rows]
        finally:
            await raw.close()
            await raw_pool.close()
        print(f"{queries} queries, k=10, one {scope_rows:,}-row scope of {rows:,} rows")
        print(f"text mode and raw SQL returned the same rows for {agree}/{queries} queries")
        print(f"{'search':<16} {'p50 ms':>8} {'p99 ms':>8}")
        for phase, label in ((spent, "modes"), (versus, "text vs raw")):
            print(f"-- {label}")
            for name, values in phase.items():
                p50, p99 = statistics.median(values), percentile(values, 99)
                print(f"{name:<16} {p50:>8.2f} {p99:>8.2f}")
        p50 = {name: statistics.median(values) for name, values in spent.items()}
        raw_p50 = {name: statistics.median(values) for name, values in versus.items()}
        print(f"hybrid p50 / vector p50 = {p50['hybrid'] / p50['vector']:.2f} (target <= 2.0)")
        for peer in ("raw SQL, conn", "raw SQL, pool"):
            ratio = raw_p50["text"] / raw_p50[peer]
            print(f"text p50 / {peer} p50 = {ratio:.2f} (target <= 1.3)")


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
