"""Hierarchical scopes: tenant / project / agent / session."""

from __future__ import annotations

import functools
import unicodedata
from dataclasses import dataclass
from typing import Literal

from memsvc.core.errors import ValidationError

Include = Literal["exact", "ancestors", "descendants"]
INCLUDE_MODES: tuple[str, ...] = ("exact", "ancestors", "descendants")
LEVELS: tuple[str, ...] = ("tenant", "project", "agent", "session")
MAX_ID_LENGTH = 255


def validate_id(field: str, value: object) -> str:
    """Check one scope id: a non-empty string of printable characters.

    Ids are data, never paths or SQL: ``"../../etc/passwd"`` is a valid id and
    is stored as those exact characters.
    """
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, not {type(value).__name__}")
    if not value:
        raise ValidationError(field, "must not be empty")
    if len(value) > MAX_ID_LENGTH:
        raise ValidationError(field, f"must be at most {MAX_ID_LENGTH} characters")
    problem = _characters_problem(value)
    if problem is not None:
        raise ValidationError(field, problem)
    return value


@functools.lru_cache(maxsize=4096)
def _characters_problem(value: str) -> str | None:
    # Remembered per id: every scope built (by callers, imports, lookups by
    # id) checks its ids, and a few ids recur, so a repeat costs a dict lookup
    # instead of a pass over the characters.
    for char in value:
        category = unicodedata.category(char)
        if category == "Cc":
            return "must not contain control characters or NUL"
        if category == "Cs":
            return "must not contain lone surrogates"
    return None


@dataclass(frozen=True, slots=True)
class Scope:
    """Where a memory lives: a tenant, optionally narrowed to project, agent, session.

    Levels may be skipped (a session directly under a tenant is fine). Two
    scopes are equal when all four levels are equal.
    """

    tenant: str = "default"
    project: str | None = None
    agent: str | None = None
    session: str | None = None

    def __post_init__(self) -> None:
        validate_id("scope.tenant", self.tenant)
        for level in LEVELS[1:]:
            value = getattr(self, level)
            if value is not None:
                validate_id(f"scope.{level}", value)

    @classmethod
    def trusted(
        cls, tenant: str, project: str | None, agent: str | None, session: str | None
    ) -> Scope:
        """Build a scope from ids that were validated before they were stored.

        Rows read back from PostgreSQL went through ``__post_init__`` on the
        way in; checking every character again would cost more than the query.
        """
        scope = object.__new__(cls)
        object.__setattr__(scope, "tenant", tenant)
        object.__setattr__(scope, "project", project)
        object.__setattr__(scope, "agent", agent)
        object.__setattr__(scope, "session", session)
        return scope

    @property
    def levels(self) -> tuple[str, str | None, str | None, str | None]:
        """The four ids, tenant first."""
        return (self.tenant, self.project, self.agent, self.session)

    @property
    def depth(self) -> int:
        """Index of the deepest level that is set (0 for a tenant-only scope)."""
        levels = self.levels
        return max(i for i, value in enumerate(levels) if value is not None)

    def ancestors(self) -> list[Scope]:
        """This scope and every scope above it on its own path, nearest first."""
        found: list[Scope] = []
        levels = self.levels
        for cut in range(self.depth, -1, -1):
            # Truncating at an unset level repeats a shallower truncation.
            candidate = Scope(*levels[: cut + 1], *([None] * (3 - cut)))  # type: ignore[arg-type]
            if candidate not in found:
                found.append(candidate)
        return found

    def with_session(self, session: str) -> Scope:
        """The same scope narrowed to ``session``."""
        return Scope(self.tenant, self.project, self.agent, session)

    def as_dict(self) -> dict[str, str | None]:
        """The scope as a plain dict (for JSON and logs)."""
        return {level: value for level, value in zip(LEVELS, self.levels, strict=True)}


def validate_include(include: object) -> Include:
    """Check an ``include`` argument."""
    if include not in INCLUDE_MODES:
        raise ValidationError("include", f"must be one of {', '.join(INCLUDE_MODES)}")
    return include  # type: ignore[return-value]
