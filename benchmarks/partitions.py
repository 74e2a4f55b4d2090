"""Tenant partitioning benchmark: memories hash-partitioned by tenant vs one table, same run.

    python -m benchmarks.partitions                    # 200,000 memories, 8 partitions
    python -m benchmarks.partitions --rows 1000000     # the million-row comparison (long)
    python -m benchmarks.partitions --partitions 16 --rounds 5
    python -m benchmarks.partitions --database-url postgresql://...

Two databases on one server get the same store: a large tenant ``t0`` (a
quarter of the rows: a 10,000-row project, five 200-row projects, the rest
in 10,000-row projects) and ``--tenants`` others with heavy-tailed sizes
(Zipf-like, exponent 1.2). Vectors are the shared set's real MiniLM
embeddings and perturbed copies (``--data``; generated ones without it), as
``benchmarks.bulk_load`` makes them. Each database is loaded with
``add_many`` while its HNSW index is dropped and built again once
(``VectorIndexRebuild``, which builds each partition's index on the
partitioned side). One is migrated with ``partitions=0``, the other with
``--partitions``.

Then, in ``--rounds`` rounds alternating which side goes first, each side
runs the same work through memsvc:

- search k=10 in a 200-row scope, the 10,000-row scope and ``t0`` tenant-wide
  (``include="descendants"``), with real held-out query embeddings: p50
  latency and recall@10 against exact top-10 computed here with numpy;
- single ``add`` (with an embedding) into the second largest tenant: ops/s.

Prints each figure for both sides and the partitioned / unpartitioned ratio
(ops/s: higher is better; latency: lower is better).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks.bulk_load import VectorSource
from benchmarks.bulk_load import create_database as create_migrated_database
from benchmarks.memories import DEFAULT_DATA
from memsvc import MemoryService, Scope, Settings
from memsvc.db.embedded import EmbeddedPostgres
from memsvc.transfer.bulk import VectorIndexRebuild

DIM = 384
BIG = "t0"
SMALL_SCOPES = 5
BATCH = 1_000


@dataclass
class Chunk:
    """Rows of one scope: their global row numbers are ``start .. start + count``."""

    scope: Scope
    start: int
    count: int


def layout(rows: int, tenants: int) -> list[Chunk]:
    """The store: t0 with the measured scopes, then heavy-tailed other tenants."""
    big = rows // 4
    sizes: list[tuple[Scope, int]] = [(Scope(BIG, "p10k"), 10_000)]
    sizes += [(Scope(BIG, f"p200_{i}"), 200) for i in range(SMALL_SCOPES)]
    left = big - 10_000 - 200 * SMALL_SCOPES
    number = 0
    while left > 0:
        sizes.append((Scope(BIG, f"bulk{number}"), min(10_000, left)))
        left -= 10_000
        number += 1
    weights = 1.0 / np.arange(1, tenants + 1) ** 1.2
    others = np.maximum(1, (weights / weights.sum() * (rows - big)).astype(int))
    others[0] += (rows - big) - int(others.sum())
    sizes += [(Scope(f"t{i + 1}", "p"), int(size)) for i, size in enumerate(others)]
    chunks, start = [], 0
    for scope, count in sizes:
        chunks.append(Chunk(scope, start, count))
        start += count
    return chunks


def memory_id(row: int) -> uuid.UUID:
    return uuid.UUID(int=row + 1)


@dataclass
class Store:
    """The generated store: its chunks, and the vectors of t0 (for ground truth)."""

    chunks: list[Chunk]
    source: VectorSource
    big_vectors: np.ndarray
    big_rows: int

    def vectors(self, chunk: Chunk) -> np.ndarray:
        rng = np.random.default_rng(chunk.start)
        return self.source.vectors(rng, chunk.start, chunk.count).astype(np.float32)


def make_store(rows: int, tenants: int, data: Path) -> Store:
    chunks = layout(rows, tenants)
    source = VectorSource(data)
    big = [c for c in chunks if c.scope.tenant == BIG]
    big_rows = sum(c.count for c in big)
    store = Store(chunks, source, np.zeros((0, DIM), np.float32), big_rows)
    store.big_vectors = np.concatenate([store.vectors(c) for c in big])
    return store


def queries(data: Path, count: int, seed: int) -> np.ndarray:
    path = data / "queries.f16.npy"
    rng = np.random.default_rng(seed)
    if path.exists():
        real = np.load(path).astype(np.float32)
        picked = real[rng.choice(len(real), size=count, replace=False)]
    else:
        picked = rng.normal(size=(count, DIM)).astype(np.float32)
    return np.asarray(picked / np.linalg.norm(picked, axis=1, keepdims=True), np.float32)


def truth(vectors: np.ndarray, first_row: int, query: np.ndarray) -> set[uuid.UUID]:
    """Exact cosine top-10 (the vectors are unit length) among ``vectors``."""
    scores = vectors @ query
    top = np.argpartition(-scores, 10)[:10]
    return {memory_id(first_row + int(i)) for i in top}


@dataclass
class Workload:
    """What each side runs: per scope kind, (scope, include, query, truth) cases."""

    cases: dict[str, list[tuple[Scope, str, np.ndarray, set[uuid.UUID]]]]
    add_scope: Scope


def make_workload(store: Store, data: Path, per_scope: int) -> Workload:
    by_scope = {c.scope: c for c in store.chunks}
    big_first = by_scope[Scope(BIG, "p10k")].start
    qs = queries(data, 3 * per_scope, seed=7)
    cases: dict[str, list[tuple[Scope, str, np.ndarray, set[uuid.UUID]]]] = {}

    def rows_of(chunk: Chunk) -> np.ndarray:
        offset = chunk.start - big_first
        return store.big_vectors[offset : offset + chunk.count]

    small = []
    for i, query in enumerate(qs[:per_scope]):
        chunk = by_scope[Scope(BIG, f"p200_{i % SMALL_SCOPES}")]
        small.append((chunk.scope, "exact", query, truth(rows_of(chunk), chunk.start, query)))
    cases["200-row scope"] = small
    chunk = by_scope[Scope(BIG, "p10k")]
    cases["10,000-row scope"] = [
        (chunk.scope, "exact", q, truth(rows_of(chunk), chunk.start, q))
        for q in qs[per_scope : 2 * per_scope]
    ]
    cases[f"tenant-wide ({store.big_rows:,} rows)"] = [
        (Scope(BIG), "descendants", q, truth(store.big_vectors, big_first, q))
        for q in qs[2 * per_scope :]
    ]
    return Workload(cases, Scope("t1", "adds"))


@dataclass
class Side:
    """One database and what was measured on it."""

    name: str
    settings: Settings
    service: MemoryService | None = None
    latencies: dict[str, list[float]] = field(default_factory=dict)
    recalls: dict[str, list[float]] = field(default_factory=dict)
    add_seconds: float = 0.0
    adds: int = 0
    load_s: float = 0.0
    build_s: float = 0.0
    paths: dict[str, str] = field(default_factory=dict)


async def create_database(admin: str, name: str, settings: Settings) -> Settings:
    dsn = await create_migrated_database(admin, name, settings)
    return settings.model_copy(update={"database_url": dsn})


async def load(side: Side, store: Store) -> None:
    settings = side.settings
    assert settings.database_url is not None
    started = time.perf_counter()
    async with MemoryService.open(settings) as svc:
        async with VectorIndexRebuild(settings.database_url, settings) as rebuild:
            for chunk in store.chunks:
                vectors = store.vectors(chunk)
                for begin in range(0, chunk.count, BATCH):
                    end = min(chunk.count, begin + BATCH)
                    await svc.memories.add_many(
                        chunk.scope,
                        [
                            {
                                "id": memory_id(chunk.start + i),
                                "content": f"memory {chunk.start + i}",
                                "embedding": vectors[i],
                            }
                            for i in range(begin, end)
                        ],
                    )
            loaded = time.perf_counter()
        side.build_s = rebuild.build_seconds
        side.load_s = loaded - started
        async with svc.pool.acquire() as conn:
            await conn.execute(f"ANALYZE {settings.db_schema}.memories")


async def measure(side: Side, workload: Workload, adds: int, round_no: int) -> None:
    svc = side.service
    assert svc is not None
    for kind, cases in workload.cases.items():
        for scope, include, query, expected in cases:
            started = time.perf_counter()
            hits = await svc.memories.search(scope, query, k=10, include=include)  # type: ignore[arg-type]
            side.latencies.setdefault(kind, []).append(time.perf_counter() - started)
            found = {hit.memory.id for hit in hits}
            side.recalls.setdefault(kind, []).append(len(found & expected) / 10)
    rng = np.random.default_rng(1000 + round_no)
    vectors = rng.normal(size=(adds, DIM)).astype(np.float32)
    started = time.perf_counter()
    for i in range(adds):
        await svc.memories.add(
            workload.add_scope, f"{side.name} add {round_no}-{i}", embedding=vectors[i]
        )
    side.add_seconds += time.perf_counter() - started
    side.adds += adds


async def plans(side: Side, workload: Workload) -> None:
    """Which path the planner takes per scope kind, with planning and execution times."""
    svc = side.service
    assert svc is not None
    for kind, cases in workload.cases.items():
        scope, include, query, _ = cases[0]
        plan = await svc.memories.explain_search(scope, query, k=10, include=include)  # type: ignore[arg-type]
        path = "HNSW" if "Index Scan using ix_memories_embedding_hnsw" in plan else "exact"
        times = {
            line.split(":")[0].strip(): line.split(":")[1].strip()
            for line in plan.splitlines()
            if line.strip().startswith(("Planning Time", "Execution Time"))
        }
        side.paths[kind] = f"{path} (planning {times.get('Planning Time', '?')}, " + (
            f"execution {times.get('Execution Time', '?')})"
        )


def report(plain: Side, parted: Side) -> None:
    print(f"\nload average: {open('/proc/loadavg').read().split()[:3]}")
    print(f"{'':32} {'unpartitioned':>14} {'partitioned':>14} {'ratio':>7}")
    plain_ops = plain.adds / plain.add_seconds
    parted_ops = parted.adds / parted.add_seconds
    print(f"{'add ops/s':32} {plain_ops:14.1f} {parted_ops:14.1f} {parted_ops / plain_ops:7.2f}")
    for kind in plain.latencies:
        a = statistics.median(plain.latencies[kind]) * 1000
        b = statistics.median(parted.latencies[kind]) * 1000
        print(f"{'search p50 ms, ' + kind:32} {a:14.2f} {b:14.2f} {b / a:7.2f}")
        ra = statistics.mean(plain.recalls[kind])
        rb = statistics.mean(parted.recalls[kind])
        print(f"{'recall@10, ' + kind:32} {ra:14.3f} {rb:14.3f}")
    for side in (plain, parted):
        print(f"{side.name}: load {side.load_s:.0f} s (index build {side.build_s:.0f} s)")
        for kind, path in side.paths.items():
            print(f"  {kind}: {path}")


async def run(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="memsvc-partitions-"))
    embedded = None
    admin = args.database_url
    if admin is None:
        embedded = EmbeddedPostgres(workdir / "data")
        admin = await asyncio.to_thread(embedded.start)
    try:
        store = make_store(args.rows, args.tenants, args.data)
        print(
            f"{args.rows:,} memories, {len(store.chunks)} scopes, {args.tenants + 1} tenants "
            f"(t0: {store.big_rows:,}), {store.source.label}",
            flush=True,
        )
        workload = make_workload(store, args.data, args.queries)
        base = Settings(database_url=admin, auto_migrate=False, pool_max_size=4)
        plain = Side("unpartitioned", await create_database(admin, "memsvc_bench_plain", base))
        parted_base = base.model_copy(update={"partitions": args.partitions})
        parted = Side(
            f"{args.partitions} partitions",
            await create_database(admin, "memsvc_bench_parted", parted_base),
        )
        for side in (plain, parted):
            await load(side, store)
            print(f"loaded {side.name} in {side.load_s:.0f} s", flush=True)
        for side in (plain, parted):
            side.service = await MemoryService.open(side.settings)
        try:
            for side in (plain, parted):
                await plans(side, workload)
            for round_no in range(args.rounds):
                order = (plain, parted) if round_no % 2 == 0 else (parted, plain)
                for side in order:
                    await measure(side, workload, args.adds, round_no)
                print(f"round {round_no + 1}/{args.rounds} done", flush=True)
        finally:
            for side in (plain, parted):
                if side.service is not None:
                    await side.service.close()
        report(plain, parted)
    finally:
        if embedded is not None:
            await asyncio.to_thread(embedded.close)
            shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--tenants", type=int, default=400, help="besides the large t0")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queries", type=int, default=40, help="per scope kind")
    parser.add_argument("--adds", type=int, default=40, help="single adds per side per round")
    parser.add_argument("--database-url", default=None, help="A server to use (superuser).")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="embeddings-small dir")
    args = parser.parse_args()
    if args.rows < 60_000:
        parser.error("--rows must be at least 60,000 (t0 holds a quarter, with a 10,000-row scope)")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
