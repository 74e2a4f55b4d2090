"""MemsvcStore against LangGraph's AsyncPostgresStore, same server, same index, one run.

    python -m benchmarks.langgraph.store                    # the issue's size: a few minutes
    python -m benchmarks.langgraph.store --total 30000 --big 10000 --repeat 3
    python -m benchmarks.langgraph.store --total 20000 --big 2000 --ops 50   # quick
    python -m benchmarks.langgraph.store --index-from 1000000000  # no namespace index
    python -m benchmarks.langgraph.store --database-url postgresql://...

Both stores are filled alike: first everything but the big namespace (the
other namespaces of an app's store, then vacuumed and analyzed), then the
big namespace, as an app that just imported would put it. Two phases are
measured, every call on both stores in turn (who goes first alternates), so
both see the same load:

- **after the load**: searches start as soon as the big namespace's last
  put returned, with no warm-up, while the tables' statistics predate the
  namespace: whatever memsvc's namespace index is doing then (built while
  the namespace was filled, or still building) is measured, as an app's
  first searches would see it;
  then single ``aput`` of new items (new vectors) into the big namespace;
- **after the build**: once memsvc's namespace index is built (the time is
  printed) and both stores' tables are vacuumed and analyzed, per round:
  ``aput`` (re-puts of unchanged items: memsvc writes no vector), ``aput``
  of new items, ``aget``, and ``asearch`` in the big namespace and in a
  200-item one, after untimed warm-up searches.

Each phase reports p50 per call, the ratio memsvc / LangGraph (lower is
faster), recall@10 against exact ground truth and short pages under a 10%
filter. The vectors are the shared embeddings-small set's (``--data``):
when its corpus file is there, the big and small namespaces hold real
sentence embeddings and the rest perturbed copies of them (gaussian noise,
re-normalised); without it, every vector is a perturbed copy of one of its
500 real query embeddings (noise of length 0.5: clusters around real
directions), and the queries are other such copies. With ``--repeat`` the
whole run (a fresh embedded server each time) repeats, and the medians of
the runs' figures are printed last.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np

from benchmarks.memories import DEFAULT_DATA, unit
from benchmarks.scratch import scratch_dir
from memsvc import MemoryService, Settings
from memsvc.db.embedded import EmbeddedPostgres
from memsvc.integrations.langgraph import MemsvcStore
from memsvc.langgraph_db import store as langgraph_store

SMALL = 200
K = 10
WARM_UP = 30
# The size: a namespace of 10,000 items among 100,000.
TOTAL = 100_000
BIG = 10_000
# Real vectors in the shared set; the big and small namespaces hold only these.
REAL = 20_000
# Vectors kept for the new items the aput_new calls put.
SPARE = 2_000


# Standard deviation of the noise per dimension of a perturbed copy: a noise
# vector of length about 0.3 against a unit vector (cosine to its origin ~0.96).
NOISE = 0.3 / np.sqrt(384)
# Without the corpus file: copies of the real queries, noise of length about 0.5.
SPREAD = 0.5 / np.sqrt(384)

Results = dict[str, dict[str, Any]]


def load(path: Path, total: int) -> tuple[np.ndarray, np.ndarray, int]:
    """``total`` unit vectors, the queries, and how many leading vectors are real."""
    real_queries = unit(np.load(path / "queries.f16.npy").astype(np.float32))
    rng = np.random.default_rng(11)
    if not (path / "vectors.f16.npy").exists():
        origins = real_queries[rng.integers(0, len(real_queries), total)]
        corpus = unit(origins + rng.normal(0.0, SPREAD, origins.shape).astype(np.float32))
        picked = real_queries[rng.integers(0, len(real_queries), len(real_queries))]
        queries = unit(picked + rng.normal(0.0, SPREAD, picked.shape).astype(np.float32))
        return corpus, queries, total
    real = unit(np.load(path / "vectors.f16.npy")[:total].astype(np.float32))
    missing = total - len(real)
    if missing <= 0:
        return real, real_queries, len(real)
    origins = real[rng.integers(0, len(real), missing)]
    noise = rng.normal(0.0, NOISE, origins.shape).astype(np.float32)
    return np.concatenate([real, unit(origins + noise)]), real_queries, len(real)


def embedder(vectors: np.ndarray, queries: np.ndarray) -> Callable[[Sequence[str]], list[Any]]:
    """Texts name their vector: ``d<i>`` is corpus row i, ``q<j>`` query j."""

    def embed(texts: Sequence[str]) -> list[Any]:
        return [(vectors if t[0] == "d" else queries)[int(t[1:])].tolist() for t in texts]

    return embed


def namespace_of(i: int, big: int) -> tuple[str, ...]:
    if i < big:
        return ("bench", "big")
    if i < big + SMALL:
        return ("bench", "small")
    return ("bench", f"other{i % 50}")


async def fill(store: Any, rows: range, big: int) -> None:
    from langgraph.store.base import PutOp

    for start in range(rows.start, rows.stop, 500):
        await store.abatch(
            [
                PutOp(namespace_of(i, big), f"k{i}", {"text": f"d{i}", "bucket": i % 10})
                for i in range(start, min(start + 500, rows.stop))
            ]
        )


async def analyze(dsn: str) -> None:
    """Vacuum, statistics and a checkpoint for both stores' fresh tables.

    Autovacuum and the checkpointer would otherwise get there during the
    first measurements, on whichever store happens to be measured then.
    """
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("VACUUM ANALYZE")
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()


async def timed(
    stores: dict[str, Any], calls: list[Callable[[Any], Awaitable[Any]]]
) -> dict[str, tuple[float, list[Any]]]:
    """Each call on every store in turn (who goes first alternates): p50 and results per store.

    Interleaving call by call, rather than timing one store's block of calls
    and then the other's, lets both see the same load on a shared machine.
    """
    names = list(stores)
    times: dict[str, list[float]] = {name: [] for name in names}
    results: dict[str, list[Any]] = {name: [] for name in names}
    for number, call in enumerate(calls):
        for name in names if number % 2 == 0 else names[::-1]:
            started = time.perf_counter()
            results[name].append(await call(stores[name]))
            times[name].append(time.perf_counter() - started)
    return {name: (statistics.median(times[name]), results[name]) for name in names}


class Bench:
    """Both stores, the vectors, and which rows each namespace holds."""

    def __init__(self, stores: dict[str, Any], vectors: np.ndarray, queries: np.ndarray,
                 big: int, total: int, ops: int) -> None:
        self.stores = stores
        self.vectors = vectors
        self.queries = queries
        self.big_rows = list(range(big))
        self.small_rows = list(range(big, big + SMALL))
        self.next_new = total  # rows total.. are spare vectors for new items
        self.ops = ops

    async def put_new(self, out: Results, rng: np.random.Generator) -> None:
        """``aput_new``: single puts of new items (a vector each) into the big namespace."""
        rows = list(range(self.next_new, self.next_new + self.ops))
        self.next_new += self.ops
        self.big_rows += rows
        record(out, "aput_new", await timed(self.stores, [put(i) for i in rows]))

    async def search(
        self, out: Results, rng: np.random.Generator, name: str, *, warm_up: bool
    ) -> None:
        """``search_<name>``: p50, recall@10, short pages of filtered searches."""
        namespace = ("bench", name)
        rows = self.big_rows if name == "big" else self.small_rows
        if warm_up:
            # Untimed searches first: connections and statement caches are warm.
            for j in rng.integers(0, len(self.queries), WARM_UP):
                for store in self.stores.values():
                    await store.asearch(namespace, query=f"q{j}", limit=K)
        chosen = rng.integers(0, len(self.queries), min(self.ops, len(self.queries)))
        searched = await timed(
            self.stores,
            [
                lambda s, j=int(j), ns=namespace: s.asearch(ns, query=f"q{j}", limit=K)
                for j in chosen
            ],
        )
        record(out, f"search_{name}", searched)
        held = np.array(rows)
        sims = self.vectors[held] @ self.queries[chosen].T
        truths = [{f"k{held[r]}" for r in np.argsort(-sims[:, c])[:K]} for c in range(len(chosen))]
        filtered = await timed(
            self.stores,
            [
                lambda s, j=int(j), ns=namespace: s.asearch(
                    ns, query=f"q{j}", filter={"bucket": {"$lt": 1}}, limit=K
                )
                for j in chosen[:50]
            ],
        )
        for store_name in self.stores:
            pages = searched[store_name][1]
            recall = [
                len(truth & {item.key for item in page}) / K
                for truth, page in zip(truths, pages, strict=True)
            ]
            out[store_name][f"recall_{name}"] = float(np.mean(recall))
            out[store_name][f"short_{name}"] = sum(
                len(page) < K for page in filtered[store_name][1]
            )

    async def after_load(self) -> Results:
        """The first searches after the load, then new items put."""
        out: Results = {name: {} for name in self.stores}
        rng = np.random.default_rng(5)
        await self.search(out, rng, "big", warm_up=False)
        await self.put_new(out, rng)
        return out

    async def after_build(self, seed: int) -> Results:
        out: Results = {name: {} for name in self.stores}
        rng = np.random.default_rng(seed)
        put_rows = rng.integers(0, len(self.big_rows) - 1, self.ops)
        keys = [self.big_rows[int(i)] for i in put_rows]
        record(out, "aput", await timed(self.stores, [put(i) for i in keys]))
        await self.put_new(out, rng)
        record(out, "aget", await timed(
            self.stores, [lambda s, i=i: s.aget(("bench", "big"), f"k{i}") for i in keys]
        ))
        for name in ("big", "small"):
            await self.search(out, rng, name, warm_up=True)
        return out


def put(i: int) -> Callable[[Any], Awaitable[Any]]:
    """A put of corpus row ``i`` as item ``k<i>`` of the big namespace."""
    return lambda store: store.aput(("bench", "big"), f"k{i}", {"text": f"d{i}", "bucket": i % 10})


def record(out: Results, key: str, timings: dict[str, tuple[float, list[Any]]]) -> None:
    for name, (p50, _) in timings.items():
        out[name][key] = p50


async def run_store(
    dsn: str,
    data: Path = DEFAULT_DATA,
    total: int = TOTAL,
    big: int = BIG,
    ops: int = 100,
    rounds: int = 1,
) -> list[tuple[str, Results]]:
    """Measure both stores on ``dsn``: the phases' figures (seconds, recall, short pages).

    The stores are filled once; each round after the build draws other
    calls and queries.
    """
    from langgraph.store.postgres.aio import AsyncPostgresStore

    new_items = ops * (rounds + 1)
    vectors, queries, real = load(data, total + max(new_items, SPARE))
    if big + SMALL > min(total, real):
        raise SystemExit(f"--big must leave {SMALL} real vectors for the small namespace")
    embed = embedder(vectors, queries)
    settings = Settings(database_url=dsn, db_schema="memsvc_bench_lg", auto_migrate=True)
    index = {"dims": vectors.shape[1], "embed": embed, "fields": ["text"]}
    results: list[tuple[str, Results]] = []
    async with (
        MemoryService.open(settings) as svc,
        AsyncPostgresStore.from_conn_string(dsn, index=index) as peer,  # type: ignore[arg-type]
    ):
        await peer.setup()
        store = MemsvcStore(svc, index=index)  # type: ignore[arg-type]
        # Both stores fill at once (each on its own connection; inserting into
        # HNSW is most of a run's time): the rest of the store, then the big
        # namespace, the import an app searches right after.
        others = range(big, total)
        await asyncio.gather(fill(store, others, big), fill(peer, others, big))
        # The store as an app had it before the import: vacuumed, with statistics.
        await store.await_index_builds()
        await analyze(dsn)
        await asyncio.gather(fill(store, range(big), big), fill(peer, range(big), big))
        loaded = time.perf_counter()
        bench = Bench({"memsvc": store, "langgraph": peer}, vectors, queries, big, total, ops)
        results.append(("after the load", await bench.after_load()))
        # An ANALYZE while a namespace index is built ends one of them (deadlock).
        await store.await_index_builds()
        waited = time.perf_counter() - loaded
        # Any build still to start (the searches counted the namespace) runs now.
        await store.asearch(("bench", "big"), query="q0", limit=1)
        await store.await_index_builds()
        print(f"memsvc's namespace index work ended {waited:.1f} s after the load; "
              f"namespace indexes: {await namespace_indexes(svc)}")
        await analyze(dsn)
        for round_ in range(rounds):
            if round_ % 2:
                bench.stores = {"langgraph": peer, "memsvc": store}
            else:
                bench.stores = {"memsvc": store, "langgraph": peer}
            results.append(("after the build", await bench.after_build(7 + round_)))
    return results


async def namespace_indexes(svc: MemoryService) -> int:
    """How many namespace indexes memsvc's catalog lists."""
    async with svc.pool.acquire() as conn:
        found: int = await conn.fetchval(
            f"SELECT count(*) FROM {svc.settings.db_schema}.langgraph_store_namespace_indexes"
        )
    return found


FIGURES = ("search_big", "aput_new", "aput", "aget", "search_small")


def report(rounds: list[tuple[str, Results]]) -> None:
    for phase, results in rounds:
        print(f"\n{phase}")
        report_round(results)


def report_round(results: Results) -> None:
    ours, theirs = results["memsvc"], results["langgraph"]
    for name in FIGURES:
        if name not in ours:
            continue
        print(
            f"{name:14} p50 memsvc {ours[name] * 1e3:7.2f} ms  langgraph "
            f"{theirs[name] * 1e3:7.2f} ms  memsvc/langgraph time {ours[name] / theirs[name]:.2f}x"
        )
    for name in ("big", "small"):
        if "recall_" + name not in ours:
            continue
        print(
            f"recall@10 {name:6} memsvc {ours['recall_' + name]:.3f}  "
            f"langgraph {theirs['recall_' + name]:.3f}"
        )
        print(
            f"short pages with a filter ({name}, of 50): memsvc {ours['short_' + name]}  "
            f"langgraph {theirs['short_' + name]}"
        )


def report_medians(runs: list[list[tuple[str, Results]]]) -> None:
    """The median over runs of each phase's figures (a phase's first round per run).

    Each side's p50s and the ratios are medians on their own: the median
    ratio is not the ratio of the median times.
    """
    print(f"\nmedians of {len(runs)} runs")
    for phase in ("after the load", "after the build"):
        firsts = [next(results for name, results in run if name == phase) for run in runs]
        merged: Results = {
            store: {
                key: statistics.median(first[store][key] for first in firsts)
                for key in firsts[0][store]
            }
            for store in ("memsvc", "langgraph")
        }
        print(f"\n{phase}")
        report_round(merged)
        for name in FIGURES:
            if name in merged["memsvc"]:
                ratios = [f["memsvc"][name] / f["langgraph"][name] for f in firsts]
                shown = ", ".join(f"{ratio:.2f}x" for ratio in ratios)
                print(f"  {name} ratio per run: {shown}; median {statistics.median(ratios):.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", help="PostgreSQL with pgvector (default: embedded)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="embeddings-small dir")
    parser.add_argument("--total", type=int, default=TOTAL, help="items in the store")
    parser.add_argument("--big", type=int, default=BIG, help="items of the big namespace")
    parser.add_argument("--ops", type=int, default=100, help="timed calls per operation")
    parser.add_argument("--rounds", type=int, default=1, help="rounds after the build")
    parser.add_argument("--repeat", type=int, default=1, help="whole runs (embedded only)")
    parser.add_argument(
        "--index-from",
        type=int,
        help="memsvc's namespace index threshold (vectors; a huge one: no namespace index)",
    )
    args = parser.parse_args()
    if args.index_from is not None:
        langgraph_store.NAMESPACE_INDEX_FROM = args.index_from
    if args.repeat > 1 and args.database_url:
        raise SystemExit("--repeat needs a fresh server per run: leave out --database-url")
    runs = []
    for number in range(args.repeat):
        if args.repeat > 1:
            print(f"\n=== run {number + 1} of {args.repeat}")
        embedded = None
        dsn = args.database_url
        if dsn is None:
            embedded = EmbeddedPostgres(scratch_dir("memsvc-bench-lg-"))
            dsn = embedded.start()
        try:
            run = asyncio.run(
                run_store(dsn, args.data, args.total, args.big, args.ops, args.rounds)
            )
        finally:
            if embedded is not None:
                embedded.close()
        report(run)
        runs.append(run)
    if len(runs) > 1:
        report_medians(runs)


if __name__ == "__main__":
    main()
