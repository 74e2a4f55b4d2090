"""When two memories say the same thing: the rule semantic deduplication applies.

Two texts are near-duplicates when the cosine similarity of their embeddings
reaches a threshold **and** they hold the same identifier-like tokens
(words with a digit: ``BA-03855``, ``2024``, ``v2``, ``41``). Sentence
embedders see little difference between "Esther uses employee number
BA-03855." and "... LO-49525." (MiniLM: cosine 0.945, above most
paraphrases of one fact), yet they are different facts; a number is where
two otherwise alike sentences most often differ in what they say. Compared
case-insensitively, as sets: word order and repetition do not matter.

:func:`raised_importance` is what a merge does to the kept memory's
importance: each repetition is independent evidence that the memory
matters, so it moves the importance part of the way towards 1.
"""

from __future__ import annotations

import re

# A token holding a digit, with the letters, digits, "_" and "-" around it.
_IDENTIFIER = re.compile(r"[\w-]*\d[\w-]*")
# How far a merge moves importance towards 1, times the incoming importance.
REINFORCE_WEIGHT = 0.5


def identifiers(text: str) -> frozenset[str]:
    """The identifier-like tokens of ``text`` (those with a digit), lower-cased."""
    return frozenset(token.strip("-_").lower() for token in _IDENTIFIER.findall(text))


def same_identifiers(a: str, b: str) -> bool:
    """Whether two texts hold the same identifier-like tokens (both may hold none)."""
    return identifiers(a) == identifiers(b)


def raised_importance(kept: float, incoming: float) -> float:
    """The kept memory's importance after a merge: ``kept + (1 - kept) x 0.5 x incoming``.

    Never lower than either (the higher of the two is the floor), at most 1.
    """
    raised = kept + (1.0 - kept) * REINFORCE_WEIGHT * incoming
    return min(1.0, max(raised, incoming))
