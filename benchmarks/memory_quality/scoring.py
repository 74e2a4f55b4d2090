"""Asking the questions and scoring the hits against the answer key.

Two lenses: ``asked``, the question searched as a user asks it, over the
whole scope; ``slot``, the same search within the memories about the
question's person and slot (``where={"about": ..., "slot": ...}``), which
leaves the store's own choices (which version, how many copies) and none of
the embedder's (which person, which attribute).

A hit answers a question when its memory states the question's fact
(``metadata["fact"]``, written by the extractor): top-1 when the first hit
does, top-5 when one of the first five does. For a paraphrase question,
``copies@5`` counts the first five hits stating the answer: 1 is one answer,
5 is the same fact five times and nothing else.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from benchmarks.memory_quality.model import Question
from memsvc import Scope

K = 5
# Candidates an oracle strategy filters down to K.
ORACLE_CANDIDATES = 100
# The moment a "valid_at" latency query asks about when its question has none.
SOME_PAST_MOMENT = datetime.fromisoformat("2024-06-15T12:00:00+00:00")


@dataclass(frozen=True)
class Strategy:
    """A store and how it is searched."""

    name: str
    store: str
    mode: str  # "vector" | "hybrid"
    validity: bool  # valid="now" for current questions, valid_at for past ones
    # The ceiling: search the plain store for more, keep the hits the answer
    # key says held at the moment asked (what a perfect validity filter keeps).
    oracle: bool = False


@dataclass
class Tally:
    top1: list[bool] = field(default_factory=list)
    top5: list[bool] = field(default_factory=list)
    copies: list[int] = field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        if not self.top1:
            return {"questions": 0}
        return {
            "questions": len(self.top1),
            "top1": round(statistics.mean(self.top1), 4),
            "top5": round(statistics.mean(self.top5), 4),
            "copies_at_5": round(statistics.mean(self.copies), 3),
        }


async def ask(
    memories: Any,
    scope: Scope,
    question: Question,
    vector: np.ndarray,
    mode: str,
    validity: bool,
    k: int = K,
    lens: str = "asked",
) -> list[Any]:
    """The hits of one question, searched the strategy's way."""
    kwargs: dict[str, Any] = {"k": k}
    if lens == "slot":
        kwargs["where"] = {"about": question.about, "slot": question.slot}
    if validity:
        if question.valid_at is not None:
            kwargs["valid_at"] = datetime.fromisoformat(question.valid_at)
        else:
            kwargs["valid"] = "now"
    if mode == "hybrid":
        return list(
            await memories.search(
                scope, question.text, mode="hybrid", query_embedding=vector, **kwargs
            )
        )
    return list(await memories.search(scope, vector, **kwargs))


async def evaluate(
    memories: Any,
    scopes: dict[str, Scope],
    questions: list[Question],
    vectors: dict[str, np.ndarray],
    strategy: Strategy,
    spans: dict[str, dict[str, tuple[str, str | None]]] | None = None,
    lens: str = "asked",
) -> dict[str, Any]:
    """Top-1, top-5 and copies@5 per question kind, and p50 latency, of one strategy.

    ``spans``: per stream, each memory key's validity from the answer key
    (``model.validity``), which an oracle strategy filters by.
    """
    tallies: dict[str, Tally] = {}
    spent: list[float] = []
    for question in questions:
        started = time.perf_counter()
        hits = await ask(
            memories,
            scopes[question.stream],
            question,
            vectors[question.id],
            strategy.mode,
            strategy.validity,
            ORACLE_CANDIDATES if strategy.oracle else K,
            lens,
        )
        spent.append(time.perf_counter() - started)
        if strategy.oracle:
            assert spans is not None
            hits = held_then(hits, question, spans[question.stream])
        facts = [hit.memory.metadata.get("fact") for hit in hits[:K]]
        kinds: list[str] = [question.kind]
        if question.kind == "current" and not question.answer.endswith("/0"):
            kinds.append("current, changed")  # the slot changed at least once
        for kind in kinds:
            tally = tallies.setdefault(kind, Tally())
            tally.top1.append(bool(facts) and facts[0] == question.answer)
            tally.top5.append(question.answer in facts)
            tally.copies.append(facts.count(question.answer))
    figures: dict[str, Any] = {kind: tally.figures() for kind, tally in tallies.items()}
    figures["p50_ms"] = round(statistics.median(spent) * 1000, 3) if spent else None
    return figures


def held_then(
    hits: list[Any], question: Question, spans: dict[str, tuple[str, str | None]]
) -> list[Any]:
    """The hits whose memory held when the question asks about (now: not ended)."""
    moment = question.valid_at
    kept = []
    for hit in hits:
        start, end = spans[hit.memory.metadata["key"]]
        if moment is None and end is None:
            kept.append(hit)
        elif moment is not None and start <= moment and (end is None or moment < end):
            kept.append(hit)
    return kept


def latency_sides(memories: Any, scope: Scope, validity: bool, hybrid: bool) -> dict[str, Any]:
    """Search calls to time in a big scope: today's, and with each validity filter."""

    def vector(**extra: Any) -> Any:
        return lambda q, v: memories.search(scope, v, k=K, **extra)

    def text(**extra: Any) -> Any:
        return lambda q, v: memories.search(
            scope, q.text, mode="hybrid", query_embedding=v, k=K, **extra
        )

    def moment(q: Question) -> datetime:
        return datetime.fromisoformat(q.valid_at) if q.valid_at else SOME_PAST_MOMENT

    sides: dict[str, Any] = {"vector": vector()}
    if hybrid:
        sides["hybrid"] = text()
    if validity:
        sides["vector, valid=all"] = vector(valid="all")
        sides["vector, valid=now"] = vector(valid="now")
        sides["vector, valid_at"] = lambda q, v: memories.search(scope, v, k=K, valid_at=moment(q))
        if hybrid:
            sides["hybrid, valid=all"] = text(valid="all")
            sides["hybrid, valid=now"] = text(valid="now")
    return sides


def percentile_ms(values: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(values), p))
