"""What cosine-threshold deduplication can do on a stream, computed without a store.

Each memory, in write order, is merged into the most similar one kept so
far if their cosine similarity reaches the threshold, else kept. Per
threshold: rows kept, how many times fewer than written, distinct facts
with no row left, and wrong merges (a memory merged into one stating
another fact, or none). ``within_slot`` only compares memories about the
same person and slot, as a dedupe that reads an extractor's metadata would.
A guide to choosing a threshold for ``add(dedupe="semantic")``, not a
measurement of memsvc.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchmarks.memory_quality.extractor import metadata
from benchmarks.memory_quality.model import Add, Dataset
from memsvc.memories.dedupe_rule import identifiers

THRESHOLDS = (0.7, 0.75, 0.8, 0.85, 0.9, 0.95)


@dataclass(frozen=True)
class SweepRow:
    threshold: float
    within_slot: bool
    same_ids: bool  # memsvc's rule: texts with different identifier-like tokens never merge
    written: int
    kept: int
    facts_lost: int
    wrong_merges: int


def sweep(
    data: Dataset,
    stream: str,
    vectors: dict[str, np.ndarray],
    thresholds: tuple[float, ...] = THRESHOLDS,
) -> list[SweepRow]:
    adds = [op for _message, op in data.adds(stream)]
    facts = {op.fact for op in adds if op.fact}
    rows = []
    ids = {op.memory: identifiers(op.content) for op in adds}
    for within_slot, same_ids in ((False, False), (False, True), (True, False)):
        for threshold in thresholds:
            kept: list[int] = []  # indexes into adds
            wrong = 0
            for index, op in enumerate(adds):
                group = _group(op) if within_slot else None
                candidates = [
                    k
                    for k in kept
                    if (not within_slot or _group(adds[k]) == group)
                    and (not same_ids or ids[adds[k].memory] == ids[op.memory])
                ]
                if candidates:
                    matrix = np.stack([vectors[adds[k].memory] for k in candidates])
                    similarity = matrix @ vectors[op.memory]
                    best = int(np.argmax(similarity))
                    if similarity[best] >= threshold:
                        wrong += adds[candidates[best]].fact != op.fact
                        continue
                kept.append(index)
            left = {adds[k].fact for k in kept if adds[k].fact}
            rows.append(
                SweepRow(
                    threshold, within_slot, same_ids, len(adds), len(kept),
                    len(facts - left), wrong,
                )
            )
    return rows


def _group(op: Add) -> tuple[object, object]:
    described = metadata(op)
    return described["about"], described["slot"]


def show(rows: list[SweepRow], stream: str) -> None:
    print(f"cosine-threshold dedup of the {stream} stream (write order, greedy)")
    print(
        f"  {'compared':<12} {'threshold':>9} {'rows':>6} {'fewer':>7} {'facts lost':>10} "
        f"{'wrong merges':>12}"
    )
    for row in rows:
        compared = (
            "same slot" if row.within_slot else "scope+ids" if row.same_ids else "whole scope"
        )
        print(
            f"  {compared:<12} {row.threshold:>9.2f} {row.kept:>6,} "
            f"{row.written / row.kept:>6.2f}x {row.facts_lost:>10} {row.wrong_merges:>12}"
        )
