"""A memory's strength: its importance, halved every half-life since it was last renewed.

``strength = importance x 0.5 ** (age / half_life)``, where ``age`` runs from
the latest of the memory's creation, its last *tracked access*
(``get(..., track_access=True)``, and :meth:`restore`, which counts as one)
and its last reinforcement (a write semantic deduplication merged into it)
to the moment of the reckoning. A plain read never renews a memory: reads
stay reads, and an app says which reads are uses by asking to track them.

The half-life is that of the most specific policy on the memory's scope
path (``svc.policies``, see :mod:`memsvc.memories.policies`); a scope under
no policy never decays for forgetting, and ranks (``rank="recall"``) with
:data:`DEFAULT_HALF_LIFE_S`. :func:`strength_sql` is the same formula in SQL,
for the forget pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from memsvc.core.models import Memory
from memsvc.core.scope import Scope

# The half-life rank="recall" assumes where no policy applies.
DEFAULT_HALF_LIFE_S = 30 * 86_400.0


def renewed_at(memory: Memory) -> datetime:
    """When the memory's age starts: its creation, last tracked access or last
    reinforcement, the latest."""
    times = [memory.created_at, memory.last_accessed_at, memory.last_reinforced_at]
    return max(t for t in times if t is not None)


def strength(importance: float, age_s: float, half_life_s: float) -> float:
    """``importance x 0.5 ** (age / half_life)``; a negative age counts as 0."""
    decay: float = 0.5 ** (max(0.0, age_s) / half_life_s)
    return importance * decay


def memory_strength(memory: Memory, now: datetime, half_life_s: float) -> float:
    """The strength of ``memory`` at ``now`` under a half-life."""
    age = (now - renewed_at(memory)).total_seconds()
    return strength(memory.importance, age, half_life_s)


def half_life_for(scope: Scope, half_lives: Mapping[Scope, float]) -> float | None:
    """The half-life of the most specific policy on ``scope``'s path (None: no policy)."""
    for ancestor in scope.ancestors():
        found = half_lives.get(ancestor)
        if found is not None:
            return found
    return None


def strength_sql(now: str, half_life: str, alias: str = "m") -> str:
    """The strength of the row ``alias`` at ``now`` (an SQL expression) under ``half_life``."""
    age = (
        f"extract(epoch FROM {now} - greatest({alias}.created_at, {alias}.last_accessed_at, "
        f"{alias}.last_reinforced_at))"
    )
    return f"({alias}.importance * power(0.5::float8, greatest(0, {age}) / {half_life}))"
