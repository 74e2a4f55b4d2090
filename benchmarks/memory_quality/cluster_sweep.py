"""What consolidation's cosine threshold groups together, computed without a store.

    python -m benchmarks.memory_quality.cluster_sweep                  # 10 people, 40 sessions
    python -m benchmarks.memory_quality.cluster_sweep --people 40 --sessions 160
    python -m benchmarks.memory_quality.cluster_sweep --run            # and time consolidate

The memory-quality dataset's distinct memories, embedded with
all-MiniLM-L6-v2 (cached like the benchmark's), are clustered in write order
by the rule ``svc.maintenance.consolidate`` applies: a memory joins the
cluster whose centroid is at least ``threshold`` similar, else starts one
with the memories in no cluster at least that similar to it when they make
``min_cluster`` (3). Per threshold: clusters, the share of memories in one,
and purity: the share of clustered memories that are about the cluster's
main person, main (person, attribute) and main fact. A guide to the default
threshold (docs/how-to/consolidation.md), not a measurement of memsvc.

``--run`` then measures memsvc: the history written into one scope of an
embedded PostgreSQL as the answer key says (valid time applied), then
``svc.maintenance.consolidate`` timed twice: the first run over every
memory valid now, and a second with nothing new (what a periodic job pays
when nothing changed).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.memory_quality.extractor import metadata
from benchmarks.memory_quality.generator import generate
from benchmarks.retrieval.dataset import embed_cached

THRESHOLDS = (0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9)
DEFAULT_CACHE = Path.home() / ".cache" / "memsvc-bench" / "memory-quality"
MAX_MEMBERS = 64


@dataclass(frozen=True)
class Row:
    threshold: float
    clusters: int
    covered: float
    person: float
    attribute: float
    fact: float


def cluster(vectors: np.ndarray, threshold: float, min_cluster: int = 3) -> list[list[int]]:
    """Clusters of row indexes, by consolidation's rule, in row order."""
    similarity = vectors @ vectors.T
    clusters: list[list[int]] = []
    sums: list[np.ndarray] = []
    placed: set[int] = set()
    for seed in range(len(vectors)):
        if seed in placed:
            continue
        if clusters:
            centroids = np.asarray([s / np.linalg.norm(s) for s in sums])
            scores = centroids @ vectors[seed]
            best = int(np.argmax(scores))
            if scores[best] >= threshold and len(clusters[best]) < MAX_MEMBERS:
                clusters[best].append(seed)
                sums[best] = sums[best] + vectors[seed]
                placed.add(seed)
                continue
        free = [
            int(j) for j in np.argsort(-similarity[seed])
            if j != seed and int(j) not in placed and similarity[seed, j] >= threshold
        ][: MAX_MEMBERS - 1]
        if 1 + len(free) >= min_cluster:
            members = [seed, *free]
            placed.update(members)
            clusters.append(members)
            sums.append(vectors[members].sum(axis=0))
    return clusters


def purity(clusters: list[list[int]], label: Callable[[int], Hashable]) -> float:
    """The share of clustered rows whose label is their cluster's most common one."""
    total = sum(len(c) for c in clusters)
    if not total:
        return 1.0
    agreeing = 0
    for members in clusters:
        labels = [label(m) for m in members]
        agreeing += max(labels.count(value) for value in set(labels))
    return agreeing / total


def sweep(described: list[dict[str, Any]], vectors: np.ndarray) -> list[Row]:
    rows = []
    for threshold in THRESHOLDS:
        found = cluster(vectors, threshold)
        rows.append(
            Row(
                threshold,
                len(found),
                sum(len(c) for c in found) / len(vectors),
                purity(found, lambda i: described[i]["about"]),
                purity(found, lambda i: (described[i]["about"], described[i]["slot"])),
                purity(found, lambda i: described[i]["fact"] or described[i]["key"]),
            )
        )
    return rows


async def timed_runs(data: Any, cache_dir: Path) -> None:
    from benchmarks.memory_quality.__main__ import embed
    from benchmarks.memory_quality.extractor import Capabilities, Store
    from benchmarks.memory_quality.pipeline import OneCallEach
    from benchmarks.scratch import scratch_dir
    from memsvc import MemoryService, Scope, Settings

    vectors = embed(data, cache_dir)
    settings = Settings(
        data_dir=scratch_dir("memsvc-consolidate-"), auto_migrate=True, pool_max_size=4
    )
    async with MemoryService.open(settings) as svc:
        caps = Capabilities.of(svc)
        store = Store("supersession", supersession=True) if caps.supersession else Store("plain")
        scope = Scope("bench-consolidate", "history")
        ops = [op for s in data.streams["history"] for m in s.messages for op in m.ops]
        await OneCallEach(svc, caps, store).apply(scope, ops, vectors)
        valid = await svc.memories.count(scope)
        for label in ("first run", "nothing new"):
            started = time.perf_counter()
            report = await svc.maintenance.consolidate(scope)
            spent = time.perf_counter() - started
            print(f"  consolidate, {label}: {spent:.2f}s over {valid:,} memories valid now; "
                  f"made {report.made}, considered {report.considered}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--people", type=int, default=10)
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--run", action="store_true", help="also time consolidate in memsvc")
    args = parser.parse_args()
    data = generate(args.seed, args.people, args.sessions)
    distinct = {}
    for stream in data.streams:
        for _message, op in data.adds(stream):
            distinct.setdefault(op.content, op)
    ops = list(distinct.values())
    vectors = np.asarray(embed_cached([op.content for op in ops], args.cache_dir), np.float64)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    described = [metadata(op) for op in ops]
    print(f"{len(ops):,} distinct memories, seed {args.seed}, {args.people} people, "
          f"{args.sessions} sessions; min_cluster 3")
    print(f"  {'threshold':>9} {'clusters':>8} {'clustered':>9} {'person':>7} "
          f"{'attribute':>9} {'fact':>6}")
    for row in sweep(described, vectors):
        print(f"  {row.threshold:>9.2f} {row.clusters:>8} {row.covered:>9.1%} "
              f"{row.person:>7.1%} {row.attribute:>9.1%} {row.fact:>6.1%}")
    if args.run:
        asyncio.run(timed_runs(data, args.cache_dir))


if __name__ == "__main__":
    main()
