"""What ``add(..., dedupe="semantic")`` costs against ``dedupe="exact"`` in a large scope.

    python -m benchmarks.dedupe_cost                       # 100,000 rows, 3 rounds of 300 adds
    python -m benchmarks.dedupe_cost --rows 20000 --adds 200

One embedded PostgreSQL (or ``--database-url``) holds one scope of
``--rows`` memories with random 384-dimension unit embeddings, loaded with
the HNSW index dropped and then rebuilt from its own definition (as a bulk
import does). Each round adds ``--adds`` new memories one at a time with
``dedupe="exact"`` and as many with ``dedupe="semantic"`` (new random
vectors: nothing to merge, so every semantic add pays the full check: the
scope lock, the nearest-neighbour read, the insert), in alternating order
from round to round. Prints p50 milliseconds per add and the ratio
semantic / exact per round, their median, and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

import asyncpg
import numpy as np

from benchmarks.scratch import scratch_dir
from memsvc import MemoryService, Scope, Settings
from memsvc.db.embedded import EmbeddedPostgres

DIM = 384
SCOPE = Scope("bench", "dedupe")
CHUNK = 2_000


def unit_vectors(rng: np.random.Generator, n: int) -> np.ndarray:
    vectors = rng.normal(size=(n, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


async def fill(svc: MemoryService, admin: asyncpg.Connection, rows: int) -> None:
    """``rows`` memories in SCOPE, the vector index rebuilt once at the end."""
    schema = svc.settings.db_schema
    definition = await admin.fetchval(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 "
        "AND indexname = 'ix_memories_embedding_hnsw'",
        schema,
    )
    await admin.execute(f"DROP INDEX {schema}.ix_memories_embedding_hnsw")
    rng = np.random.default_rng(7)
    started = time.perf_counter()
    for start in range(0, rows, CHUNK):
        count = min(CHUNK, rows - start)
        vectors = unit_vectors(rng, count)
        await svc.memories.add_many(
            SCOPE,
            [
                {"content": f"stored fact number {start + i}", "embedding": vectors[i]}
                for i in range(count)
            ],
        )
    print(f"loaded {rows:,} rows in {time.perf_counter() - started:.0f} s; building the index")
    started = time.perf_counter()
    await admin.execute("SET maintenance_work_mem = '512MB'")
    await admin.execute(definition)
    await admin.execute(f"VACUUM ANALYZE {schema}.memories")
    print(f"index built in {time.perf_counter() - started:.0f} s")


async def timed_adds(svc: MemoryService, mode: str, vectors: np.ndarray, tag: str) -> float:
    """p50 milliseconds of adding each vector as a new memory with ``mode``."""
    times = []
    for i, vector in enumerate(vectors):
        t0 = time.perf_counter()
        memory = await svc.memories.add(
            SCOPE, f"new fact {tag} {i}", embedding=vector, dedupe=mode  # type: ignore[arg-type]
        )
        times.append(time.perf_counter() - t0)
        assert not memory.merged
    return statistics.median(times) * 1000


async def run(args: argparse.Namespace) -> None:
    embedded = None
    dsn = args.database_url
    if dsn is None:
        embedded = EmbeddedPostgres(scratch_dir("memsvc-dedupe-") / "data")
        dsn = await asyncio.to_thread(embedded.start)
    settings = Settings(
        database_url=dsn, auto_migrate=True, pool_max_size=4, statement_timeout_ms=0
    )
    svc = await MemoryService.open(settings)
    admin = await asyncpg.connect(dsn)
    try:
        await fill(svc, admin, args.rows)
        rng = np.random.default_rng(11)
        ratios = []
        for round_ in range(args.rounds):
            order = ["exact", "semantic"] if round_ % 2 == 0 else ["semantic", "exact"]
            p50 = {}
            for mode in order:
                vectors = unit_vectors(rng, args.adds)
                p50[mode] = await timed_adds(svc, mode, vectors, f"{round_}-{mode}")
            ratio = p50["semantic"] / p50["exact"]
            ratios.append(ratio)
            print(
                f"round {round_ + 1}: exact p50 {p50['exact']:.2f} ms, semantic p50 "
                f"{p50['semantic']:.2f} ms, semantic / exact {ratio:.2f}x "
                f"(load {os.getloadavg()[0]:.2f})"
            )
        count = await svc.memories.count(SCOPE)
        print(
            f"{count:,} rows at the end; add semantic / exact: "
            f"{' '.join(f'{r:.2f}' for r in ratios)}x, median {statistics.median(ratios):.2f}x"
        )
    finally:
        await admin.close()
        await svc.close()
        if embedded is not None:
            await asyncio.to_thread(embedded.close)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--database-url", help="PostgreSQL with pgvector (default: embedded)")
    parser.add_argument("--rows", type=int, default=100_000, help="memories in the scope")
    parser.add_argument("--adds", type=int, default=300, help="adds per mode per round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
