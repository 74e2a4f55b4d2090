"""MemsvcStore against LangGraph's AsyncPostgresStore, same server, same index, one run.

    python -m benchmarks.langgraph.store                    # the issue's size: a few minutes
    python -m benchmarks.langgraph.store --total 20000 --big 2000 --ops 50   # quick
    python -m benchmarks.langgraph.store --database-url postgresql://...

Reports ``aput``/``aget`` p50 and ``asearch`` (with a query) p50 in a
namespace of 10,000 items among 100,000 and in a 200-item one, recall@10
against exact ground truth, and short pages under a filter. The big and the
small namespace hold real sentence embeddings of the shared embeddings-small
set (``--data``); that set has 20,000, so the rest of the store is filled
with perturbed copies of real vectors (gaussian noise, re-normalised): they
crowd the shared HNSW graph like other users' items would, and the ground
truth (over the big namespace's real vectors) stays exact. Ratios are
memsvc / LangGraph.
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

SMALL = 200
K = 10
WARM_UP = 30
# The size: a namespace of 10,000 items among 100,000.
TOTAL = 100_000
BIG = 10_000
# Real vectors in the shared set; the big and small namespaces hold only these.
REAL = 20_000


# Standard deviation of the noise per dimension of a perturbed copy: a noise
# vector of length about 0.3 against a unit vector (cosine to its origin ~0.96).
NOISE = 0.3 / np.sqrt(384)


def load(path: Path, total: int) -> tuple[np.ndarray, np.ndarray]:
    """``total`` unit vectors (the real ones first, then perturbed copies) and the queries."""
    real = unit(np.load(path / "vectors.f16.npy")[:total].astype(np.float32))
    queries = unit(np.load(path / "queries.f16.npy").astype(np.float32))
    missing = total - len(real)
    if missing <= 0:
        return real, queries
    rng = np.random.default_rng(11)
    origins = real[rng.integers(0, len(real), missing)]
    noise = rng.normal(0.0, NOISE, origins.shape).astype(np.float32)
    return np.concatenate([real, unit(origins + noise)]), queries


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


async def fill(store: Any, total: int, big: int) -> None:
    from langgraph.store.base import PutOp

    for start in range(0, total, 500):
        await store.abatch(
            [
                PutOp(namespace_of(i, big), f"k{i}", {"text": f"d{i}", "bucket": i % 10})
                for i in range(start, min(start + 500, total))
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


async def index_namespaces(store: MemsvcStore) -> None:
    """Let memsvc build the big namespace's own index, as a running app's first search would.

    The build runs in the background after the search that counts the
    namespace; the timed searches measure the store once it is there.
    """
    started = time.perf_counter()
    for namespace in (("bench", "big"), ("bench", "small")):
        await store.asearch(namespace, query="q0", limit=1)
        await store.await_index_builds()
    print(f"memsvc namespace index build: {time.perf_counter() - started:.1f} s")


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


async def measure(
    stores: dict[str, Any],
    vectors: np.ndarray,
    queries: np.ndarray,
    big: int,
    ops: int,
    seed: int = 7,
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {name: {} for name in stores}

    def record(key: str, timings: dict[str, tuple[float, list[Any]]]) -> None:
        for name, (p50, _) in timings.items():
            out[name][key] = p50

    rng = np.random.default_rng(seed)
    put_rows = rng.integers(0, big, ops)
    record(
        "aput",
        await timed(
            stores,
            [
                lambda s, i=int(i): s.aput(
                    ("bench", "big"), f"k{i}", {"text": f"d{i}", "bucket": i % 10}
                )
                for i in put_rows
            ],
        ),
    )
    record(
        "aget",
        await timed(
            stores, [lambda s, i=int(i): s.aget(("bench", "big"), f"k{i}") for i in put_rows]
        ),
    )
    for name, namespace, rows in (
        ("big", ("bench", "big"), np.arange(big)),
        ("small", ("bench", "small"), np.arange(big, big + SMALL)),
    ):
        # Untimed searches first: connections and statement caches are warm.
        for j in rng.integers(0, len(queries), WARM_UP):
            for store in stores.values():
                await store.asearch(namespace, query=f"q{j}", limit=K)
        chosen = rng.integers(0, len(queries), min(ops, len(queries)))
        searched = await timed(
            stores,
            [
                lambda s, j=int(j), ns=namespace: s.asearch(ns, query=f"q{j}", limit=K)
                for j in chosen
            ],
        )
        record(f"search_{name}", searched)
        sims = vectors[rows] @ queries[chosen].T
        truths = [{f"k{rows[r]}" for r in np.argsort(-sims[:, c])[:K]} for c in range(len(chosen))]
        filtered = await timed(
            stores,
            [
                lambda s, j=int(j), ns=namespace: s.asearch(
                    ns, query=f"q{j}", filter={"bucket": {"$lt": 1}}, limit=K
                )
                for j in chosen[:50]
            ],
        )
        for store_name in stores:
            pages = searched[store_name][1]
            recall = [
                len(truth & {item.key for item in page}) / K
                for truth, page in zip(truths, pages, strict=True)
            ]
            out[store_name][f"recall_{name}"] = float(np.mean(recall))
            out[store_name][f"short_{name}"] = sum(
                len(page) < K for page in filtered[store_name][1]
            )
    return out


async def run_store(
    dsn: str,
    data: Path = DEFAULT_DATA,
    total: int = TOTAL,
    big: int = BIG,
    ops: int = 100,
    rounds: int = 1,
) -> list[dict[str, dict[str, Any]]]:
    """Measure both stores on ``dsn``: per round, their figures (seconds, recall, short pages).

    The stores are filled once; each round draws other calls and queries, and
    every call runs on both stores in turn (who goes first alternates).
    """
    from langgraph.store.postgres.aio import AsyncPostgresStore

    vectors, queries = load(data, total)
    if big + SMALL > min(total, REAL):
        raise SystemExit(f"--big must leave {SMALL} real vectors for the small namespace")
    embed = embedder(vectors, queries)
    settings = Settings(database_url=dsn, db_schema="memsvc_bench_lg", auto_migrate=True)
    index = {"dims": vectors.shape[1], "embed": embed, "fields": ["text"]}
    results: list[dict[str, dict[str, Any]]] = []
    async with (
        MemoryService.open(settings) as svc,
        AsyncPostgresStore.from_conn_string(dsn, index=index) as peer,  # type: ignore[arg-type]
    ):
        await peer.setup()
        store = MemsvcStore(svc, index=index)  # type: ignore[arg-type]
        # Both stores fill at once (each on its own connection; inserting into
        # HNSW is most of a run's time), then both are measured call by call in turn.
        await asyncio.gather(fill(store, total, big), fill(peer, total, big))
        await analyze(dsn)
        await index_namespaces(store)
        for round_ in range(rounds):
            stores = {"memsvc": store, "langgraph": peer}
            if round_ % 2:
                stores = {"langgraph": peer, "memsvc": store}
            results.append(await measure(stores, vectors, queries, big, ops, 7 + round_))
    return results


def report(rounds: list[dict[str, dict[str, Any]]]) -> None:
    for number, results in enumerate(rounds, 1):
        if len(rounds) > 1:
            print(f"round {number} of {len(rounds)}")
        report_round(results)


def report_round(results: dict[str, dict[str, Any]]) -> None:
    ours, theirs = results["memsvc"], results["langgraph"]
    for name in ("aput", "aget", "search_big", "search_small"):
        speed = theirs[name] / ours[name]
        print(
            f"{name:14} p50 memsvc {ours[name] * 1e3:7.2f} ms  langgraph "
            f"{theirs[name] * 1e3:7.2f} ms  memsvc/langgraph time {ours[name] / theirs[name]:.2f}x"
            f"  (speed {speed:.2f}x)"
        )
    for name in ("big", "small"):
        print(
            f"recall@10 {name:6} memsvc {ours['recall_' + name]:.3f}  "
            f"langgraph {theirs['recall_' + name]:.3f}"
        )
        print(
            f"short pages with a filter ({name}, of 50): memsvc {ours['short_' + name]}  "
            f"langgraph {theirs['short_' + name]}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", help="PostgreSQL with pgvector (default: embedded)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="embeddings-small dir")
    parser.add_argument("--total", type=int, default=TOTAL, help="items in the store")
    parser.add_argument("--big", type=int, default=BIG, help="items of the big namespace")
    parser.add_argument("--ops", type=int, default=100, help="timed calls per operation")
    parser.add_argument("--rounds", type=int, default=1, help="measurements of the one fill")
    args = parser.parse_args()
    embedded = None
    dsn = args.database_url
    if dsn is None:
        embedded = EmbeddedPostgres(scratch_dir("memsvc-bench-lg-"))
        dsn = embedded.start()
    try:
        report(asyncio.run(run_store(dsn, args.data, args.total, args.big, args.ops, args.rounds)))
    finally:
        if embedded is not None:
            embedded.close()


if __name__ == "__main__":
    main()
