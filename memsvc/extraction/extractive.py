"""A summarizer without a model: the cluster's medoid plus its distinguishing terms."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

from memsvc.core.errors import ValidationError
from memsvc.extraction.protocols import SummaryMember

_WORD = re.compile(r"[^\W_][\w'-]*", re.UNICODE)
# Words that say nothing about a cluster's subject.
_STOPWORDS = frozenset(
    """a about after again all also am an and any are as at be because been before being
    both but by can could did do does doing down during each few for from further had has
    have having he her here hers him his how i if in into is it its itself just me more
    most my no nor not now of off on once only or other our ours out over own same she
    should so some such than that the their theirs them then there these they this those
    through to too under until up very was we were what when where which while who whom
    why will with would you your yours user users""".split()
)


def _terms(text: str) -> list[str]:
    return [
        word for word in (w.lower() for w in _WORD.findall(text))
        if len(word) > 2 and word not in _STOPWORDS
    ]


class ExtractiveSummarizer:
    """The member most like all the others (the medoid), with the terms it lacks.

    The medoid is found by cosine similarity of the members' embeddings when
    every member has one, else by the overlap of their words. The
    distinguishing terms are the words other members hold and the medoid
    does not, most widely shared first: the summary reads as the medoid
    followed by ``(also: term, term...)``. Deterministic, no model, no network.

    Args:
        max_terms: Most terms added to the medoid.
    """

    name = "extractive"
    version = "extractive-v1"
    model: str | None = None

    def __init__(self, *, max_terms: int = 8) -> None:
        if isinstance(max_terms, bool) or not isinstance(max_terms, int) or max_terms < 0:
            raise ValidationError("max_terms", "must be a non-negative integer")
        self.max_terms = max_terms

    def __repr__(self) -> str:
        return f"ExtractiveSummarizer(max_terms={self.max_terms})"

    async def summarize(self, members: Sequence[SummaryMember]) -> str:
        """The medoid's content, followed by the terms of the others it lacks."""
        if not members:
            raise ValidationError("members", "must not be empty")
        medoid = members[medoid_index(members)]
        own = set(_terms(medoid.content))
        shared: Counter[str] = Counter()
        first_seen: dict[str, int] = {}
        for member in members:
            if member is medoid:
                continue
            for term in dict.fromkeys(_terms(member.content)):
                if term not in own:
                    shared[term] += 1
                    first_seen.setdefault(term, len(first_seen))
        ranked = sorted(shared, key=lambda term: (-shared[term], first_seen[term]))
        terms = ranked[: self.max_terms]
        return f"{medoid.content} (also: {', '.join(terms)})" if terms else medoid.content


def medoid_index(members: Sequence[SummaryMember]) -> int:
    """The position of the member with the greatest total similarity to the others."""
    if len(members) <= 2:
        return 0
    if all(member.embedding is not None for member in members):
        matrix = np.asarray([member.embedding for member in members], dtype=np.float64)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        unit = matrix / np.where(norms == 0, 1.0, norms)
        totals = (unit @ unit.T).sum(axis=1)
    else:
        words = [set(_terms(member.content)) for member in members]
        totals = np.asarray(
            [
                sum(len(a & b) / max(1, len(a | b)) for b in words)
                for a in words
            ]
        )
    # Ties go to the earliest member, so the choice is stable.
    return int(np.argmax(totals))
