"""Recall audit: how much of the true top k the normal search path returns.

Vector search walks an approximate (HNSW) index for large scopes, so its
answers can miss true neighbours, and nothing says so. The audit samples
stored memories' own embeddings as queries (optionally perturbed), runs each
through the normal search path and through an exact scan of the same scope,
and reports per scope-size bucket:

- recall@k: the share of the exact top k that the normal path returned. A hit
  whose similarity ties the exact k-th one counts as found (with ties, either
  row is a correct answer);
- short pages: searches that returned fewer hits than the exact scan.

Scopes are exact scopes (tenant, project, agent, session) and their size is
the number of live memories with an embedding. The sample spreads over as
many scopes of a bucket as it can, so one large scope does not stand for all.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import numpy as np

from memsvc.core.errors import ValidationError
from memsvc.core.models import SearchHit, scope_from_row
from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.db.sql import Params, scope_condition
from memsvc.memories.repository import MemoryRepository
from memsvc.ops import recall_audit_queries as q
from memsvc.progress import NO_PROGRESS, ProgressReporter

DEFAULT_SAMPLE = 100
DEFAULT_THRESHOLD = 0.9
DEFAULT_K = 10
MAX_SAMPLE = 100_000
# Similarities within this of the exact k-th one are ties (float4 storage).
TIE_TOLERANCE = 1e-6

# (smallest, largest) rows of a scope in each bucket; None: no upper bound.
BUCKETS: tuple[tuple[int, int | None], ...] = (
    (1, 99),
    (100, 999),
    (1_000, 9_999),
    (10_000, None),
)


def bucket_label(low: int, high: int | None) -> str:
    """``(1000, 9999)`` -> ``"1,000-9,999"``; ``(10000, None)`` -> ``"10,000+"``."""
    return f"{low:,}+" if high is None else f"{low:,}-{high:,}"


def bucket_of(size: int) -> int:
    """Index in :data:`BUCKETS` of a scope holding ``size`` rows (size >= 1)."""
    for i, (low, high) in enumerate(BUCKETS):
        if size >= low and (high is None or size <= high):
            return i
    raise ValueError(f"no bucket for a scope of {size} rows")


@dataclass(frozen=True, slots=True)
class BucketRecall:
    """Audit figures of one scope-size bucket."""

    label: str
    min_rows: int
    max_rows: int | None
    scopes: int  # scopes of this size in the database
    queries: int  # sampled queries run
    recall: float | None  # mean recall@k; None when the bucket had no scopes
    worst: float | None  # the lowest single-query recall@k
    short_pages: int  # searches that returned fewer hits than the exact scan


@dataclass(frozen=True, slots=True)
class RecallReport:
    """What :func:`recall_audit` found; ``ok`` when every bucket meets the threshold."""

    k: int
    threshold: float
    sample: int
    buckets: tuple[BucketRecall, ...]

    @property
    def failing(self) -> list[BucketRecall]:
        """Buckets whose recall is below the threshold."""
        return [b for b in self.buckets if b.recall is not None and b.recall < self.threshold]

    @property
    def ok(self) -> bool:
        """True when no bucket's recall is below the threshold."""
        return not self.failing


def query_recall(found: Sequence[SearchHit], exact: Sequence[SearchHit]) -> float:
    """Recall of ``found`` against the exact answer ``exact`` (both best first)."""
    if not exact:
        return 1.0
    wanted = {hit.memory.id for hit in exact}
    # Vector hits always carry a similarity; a tie with the exact k-th counts as found.
    kth = (exact[-1].similarity or 0.0) - TIE_TOLERANCE
    hits = sum(
        1
        for hit in found
        if hit.memory.id in wanted or (hit.similarity is not None and hit.similarity >= kth)
    )
    return min(1.0, hits / len(exact))


async def _exact_search(
    memories: MemoryRepository, scope: Scope, query: np.ndarray[Any, Any], k: int
) -> list[SearchHit]:
    # The one place the audit forces an exact scan of the same search path.
    return await memories.search(scope, query, k=k, plan="exact")


def _validate(sample: object, threshold: object, k: object, perturb: object) -> None:
    if isinstance(sample, bool) or not isinstance(sample, int) or not 1 <= sample <= MAX_SAMPLE:
        raise ValidationError("sample", f"must be an integer from 1 to {MAX_SAMPLE}")
    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, int | float)
        or not 0.0 <= threshold <= 1.0
    ):
        raise ValidationError("threshold", "must be a number from 0 to 1")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 1000:
        raise ValidationError("k", "must be an integer from 1 to 1000")
    if (
        isinstance(perturb, bool)
        or not isinstance(perturb, int | float)
        or not 0.0 <= perturb <= 1.0
    ):
        raise ValidationError("perturb", "must be a number from 0 to 1")


def _allocate(
    scopes: list[tuple[Scope, int]], sample: int, rng: random.Random
) -> list[tuple[Scope, int]]:
    """How many queries to draw from which scope: spread over as many scopes as possible."""
    if len(scopes) >= sample:
        return [(scope, 1) for scope, _ in rng.sample(scopes, sample)]
    per, extra = divmod(sample, len(scopes))
    shuffled = rng.sample(scopes, len(scopes))
    return [(scope, min(size, per + (i < extra))) for i, (scope, size) in enumerate(shuffled)]


def _perturbed(vector: np.ndarray[Any, Any], amount: float, rng: np.random.Generator) -> Any:
    """``vector`` moved by ``amount`` of its length in a random direction."""
    if amount == 0.0:
        return vector
    noise = rng.normal(size=vector.shape[0])
    noise *= amount * float(np.linalg.norm(vector)) / float(np.linalg.norm(noise))
    return (vector + noise).astype(np.float32)


async def recall_audit(
    pool: asyncpg.Pool,
    settings: Settings,
    memories: MemoryRepository,
    *,
    sample: int = DEFAULT_SAMPLE,
    threshold: float = DEFAULT_THRESHOLD,
    k: int = DEFAULT_K,
    perturb: float = 0.0,
    seed: int = 0,
    progress: ProgressReporter = NO_PROGRESS,
) -> RecallReport:
    """Audit search recall per scope-size bucket (see the module docstring).

    Args:
        pool: The service's pool (the audit reads scope sizes and samples).
        settings: The service's settings.
        memories: The repository whose ``search`` is audited.
        sample: Queries per bucket (at most; a bucket of few small scopes has
            fewer rows than that).
        threshold: Recall below which a bucket fails.
        k: Hits per search.
        perturb: Move each query by this share of its length in a random
            direction (0: the stored embedding itself).
        seed: Fixes which rows are sampled and how they are perturbed.
        progress: Told the number of queries and each one run.
    """
    _validate(sample, threshold, k, perturb)
    schema = settings.db_schema
    async with pool.acquire() as conn:
        rows = await conn.fetch(q.scope_sizes(schema))
    by_bucket: list[list[tuple[Scope, int]]] = [[] for _ in BUCKETS]
    for row in rows:
        by_bucket[bucket_of(row["size"])].append((scope_from_row(row), row["size"]))

    rng = random.Random(seed)
    plans = [_allocate(scopes, sample, rng) if scopes else [] for scopes in by_bucket]
    total = sum(count for plan in plans for _, count in plan)
    progress.start("recall audit", total=total, unit="queries")
    noise = np.random.default_rng(seed)
    buckets = []
    try:
        for (low, high), scopes, plan in zip(BUCKETS, by_bucket, plans, strict=True):
            recalls: list[float] = []
            short = 0
            for scope, count in plan:
                for query in await _sample(pool, schema, scope, count, seed):
                    query = _perturbed(query, float(perturb), noise)
                    found = await memories.search(scope, query, k=k)
                    exact = await _exact_search(memories, scope, query, k)
                    recalls.append(query_recall(found, exact))
                    short += len(found) < len(exact)
                    progress.advance()
            buckets.append(
                BucketRecall(
                    label=bucket_label(low, high),
                    min_rows=low,
                    max_rows=high,
                    scopes=len(scopes),
                    queries=len(recalls),
                    recall=sum(recalls) / len(recalls) if recalls else None,
                    worst=min(recalls) if recalls else None,
                    short_pages=short,
                )
            )
    finally:
        progress.done()
    return RecallReport(k=k, threshold=float(threshold), sample=sample, buckets=tuple(buckets))


async def _sample(
    pool: asyncpg.Pool, schema: str, scope: Scope, count: int, seed: int
) -> list[np.ndarray[Any, Any]]:
    params = Params()
    scope_sql = scope_condition(scope, "exact", params)
    sql = q.sample_embeddings(schema, scope_sql, params.add(count), params.add(seed))
    async with pool.acquire() as conn:
        rows = await conn.fetch(sql, *params.values)
    return [row["embedding"] for row in rows]
