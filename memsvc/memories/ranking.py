"""Re-ordering search candidates after the database: reranker, recall weighting, diversity.

Pure Python over :class:`memsvc.core.models.SearchHit` lists; the search statement
(:func:`memsvc.memories.queries.search`) finds and fuses the candidates, this module
only reorders them before the top ``k`` are cut (see :mod:`memsvc.memories.search`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from memsvc.core.errors import MemsvcError
from memsvc.core.models import SearchHit
from memsvc.core.scope import Scope
from memsvc.memories.strength import DEFAULT_HALF_LIFE_S, half_life_for, memory_strength

# An async callable scoring contents against the query text, higher is better.
Reranker = Callable[[str, list[str]], Awaitable[Sequence[float]]]

# rank="recall": score = SIMILARITY_WEIGHT * relevance + STRENGTH_WEIGHT *
# strength (importance decayed by the scope's half-life, see
# memsvc.memories.strength).
SIMILARITY_WEIGHT = 0.7
STRENGTH_WEIGHT = 0.3


async def rerank(reranker: Reranker, query: str, hits: list[SearchHit]) -> list[SearchHit]:
    """Score ``hits`` with ``reranker``; best first, the reranker's score as ``score``."""
    if not hits:
        return hits
    scores = list(await reranker(query, [hit.memory.content for hit in hits]))
    if len(scores) != len(hits):
        raise MemsvcError(f"the reranker returned {len(scores)} scores for {len(hits)} candidates")
    checked = []
    for i, score in enumerate(scores):
        if isinstance(score, bool) or not isinstance(score, int | float | np.floating):
            raise MemsvcError(f"the reranker's score {i} is not a number: {type(score).__name__}")
        if not math.isfinite(score):
            raise MemsvcError(f"the reranker's score {i} is {score}, not a finite number")
        checked.append(float(score))
    order = sorted(range(len(hits)), key=lambda i: checked[i], reverse=True)
    return [dataclasses.replace(hits[i], score=checked[i]) for i in order]


def _relevance(hits: Sequence[SearchHit]) -> list[float]:
    """Scores scaled to [0, 1] within the candidates (1 for all when they tie)."""
    scores = [hit.score for hit in hits]
    low, high = min(scores), max(scores)
    if high <= low:
        return [1.0] * len(hits)
    return [(score - low) / (high - low) for score in scores]


def rank_for_recall(
    hits: list[SearchHit],
    *,
    by_similarity: bool,
    half_lives: Mapping[Scope, float] | None = None,
) -> list[SearchHit]:
    """Weigh relevance and strength (``rank="recall"``), best first.

    Relevance is the vector similarity in vector mode, and otherwise the
    hit's score scaled to [0, 1] within the candidates. Strength is the
    memory's importance halved every half-life (its scope's policy in
    ``half_lives``, by exact scope; else 30 days) since its creation or last
    tracked access.
    """
    if not hits:
        return hits
    now = datetime.now(UTC)
    relevance = [hit.similarity or 0.0 for hit in hits] if by_similarity else _relevance(hits)
    found = half_lives or {}
    ranked = []
    for hit, relevant in zip(hits, relevance, strict=True):
        half_life = half_life_for(hit.memory.scope, found) if found else None
        strong = memory_strength(hit.memory, now, half_life or DEFAULT_HALF_LIFE_S)
        score = SIMILARITY_WEIGHT * relevant + STRENGTH_WEIGHT * strong
        ranked.append(dataclasses.replace(hit, score=score))
    ranked.sort(key=lambda hit: hit.score, reverse=True)
    return below_summaries(ranked)


def _derived_from(hit: SearchHit) -> list[str]:
    """The member ids a summary memory lists (``metadata["derived_from"]``), else none."""
    metadata = hit.memory.metadata
    members = metadata.get("derived_from") if metadata.get("kind") == "summary" else None
    if not isinstance(members, list):
        return []
    return [member for member in members if isinstance(member, str)]


def below_summaries(ranked: list[SearchHit]) -> list[SearchHit]:
    """Hits that a summary among ``ranked`` was derived from, moved just below it.

    A member scoring at least its summary gets the largest score below the
    summary's, so a consolidated cluster reads summary first; the order is
    otherwise kept (``ranked`` is best first).
    """
    ceiling: dict[str, float] = {}
    for hit in ranked:
        for member in _derived_from(hit):
            ceiling[member] = min(ceiling.get(member, math.inf), hit.score)
    if not ceiling:
        return ranked
    moved = []
    for hit in ranked:
        cap = ceiling.get(str(hit.memory.id))
        if cap is not None and hit.score >= cap:
            hit = dataclasses.replace(hit, score=math.nextafter(cap, -math.inf))
        moved.append(hit)
    moved.sort(key=lambda hit: hit.score, reverse=True)
    return moved


def _unit_vectors(hits: Sequence[SearchHit]) -> np.ndarray[Any, Any]:
    rows = []
    width = next((len(h.memory.embedding) for h in hits if h.memory.embedding is not None), 1)
    for hit in hits:
        vector = (
            np.zeros(width)
            if hit.memory.embedding is None
            else np.asarray(hit.memory.embedding, dtype=np.float64)
        )
        norm = float(np.linalg.norm(vector))
        rows.append(vector / norm if norm > 0 else vector)
    return np.vstack(rows)


def diversify(hits: list[SearchHit], diversity: float, k: int) -> list[SearchHit]:
    """Maximal marginal relevance: the ``k`` hits that are relevant and unlike each other.

    Each pick maximises ``(1 - diversity) * relevance - diversity * max
    cosine similarity to the hits already picked``; relevance is the score
    scaled to [0, 1] within the candidates. ``diversity=0`` keeps the
    relevance order; memories without an embedding count as unlike all others.
    """
    if not hits or diversity == 0:
        return hits[:k]
    relevance = np.asarray(_relevance(hits))
    vectors = _unit_vectors(hits)
    similar = vectors @ vectors.T
    chosen: list[int] = []
    closest = np.full(len(hits), -np.inf)  # max similarity to anything chosen
    left = np.ones(len(hits), dtype=bool)
    while len(chosen) < min(k, len(hits)):
        penalty = np.where(np.isfinite(closest), closest, 0.0)
        value = (1 - diversity) * relevance - diversity * penalty
        value[~left] = -np.inf
        pick = int(np.argmax(value))
        chosen.append(pick)
        left[pick] = False
        closest = np.maximum(closest, similar[pick])
    return [hits[i] for i in chosen]
