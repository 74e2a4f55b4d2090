"""The storage interface behind :class:`~memsvc.working.WorkingMemory`.

A :class:`WorkingStore` holds many sessions, each addressed by its
:class:`~memsvc.core.scope.Scope`. Every method is one atomic operation on one
session: a single Lua script or MULTI on Redis, a single lock hold in
:class:`~memsvc.working.local_store.LocalStore`. Values cross this interface as
JSON text that :class:`WorkingMemory` has already validated; the stores never
parse user data.

:mod:`memsvc.working.opening` chooses a backend; it imports Redis's lazily,
so the in-process store does not load redis-py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from memsvc.core.scope import Scope
    from memsvc.core.settings import Settings



@dataclass(frozen=True, slots=True)
class SessionLimits:
    """Bounds applied by a store to one session, taken from the caller's settings."""

    max_keys: int
    """Most user keys a session may hold at once."""
    max_scratchpad_entries: int
    """Scratchpad length; older entries are dropped on append."""
    idle_ttl_ms: int | None
    """How long task state, scratchpad and metadata outlive the session's last write."""

    @classmethod
    def from_settings(cls, settings: Settings) -> SessionLimits:
        """Limits from ``working_memory_*`` and ``scratchpad_max_entries`` settings."""
        ttl = settings.working_memory_default_ttl_seconds
        return cls(
            max_keys=settings.working_memory_max_keys,
            max_scratchpad_entries=settings.scratchpad_max_entries,
            idle_ttl_ms=None if ttl is None else ttl * 1000,
        )


@dataclass(frozen=True, slots=True)
class SessionSnapshot:
    """A session's whole state read at one instant (what a checkpoint stores)."""

    values: dict[str, tuple[str, int | None]]
    """User key -> (JSON text, remaining TTL in ms or None for no expiry)."""
    task: dict[str, str] | None
    """Task-state field -> JSON text, or None when no task state is set."""
    scratchpad: list[str]
    """Scratchpad entries (JSON text of ``{"content", "timestamp"}``), oldest first."""


@dataclass(frozen=True, slots=True)
class SessionStats:
    """Counts describing one session."""

    user_keys: int
    scratchpad_entries: int
    has_task_state: bool
    created_at: str | None


class WorkingStore(Protocol):
    """Session-scoped, atomic storage for working memory.

    Every method raises :class:`~memsvc.core.errors.WorkingMemoryError` when the
    backend fails; a backend's own exceptions never escape.
    """

    @property
    def backend(self) -> str:
        """``"redis"`` or ``"local"``."""
        ...

    @property
    def using_fallback(self) -> bool:
        """True when this store replaces an unreachable Redis."""
        ...

    async def set_value(
        self, scope: Scope, key: str, value: str, ttl_ms: int | None, limits: SessionLimits
    ) -> bool:
        """Store ``value`` under ``key``; False (nothing written) when the session is full."""
        ...

    async def get_value(self, scope: Scope, key: str) -> str | None:
        """The JSON text under ``key``, or None."""
        ...

    async def delete_value(self, scope: Scope, key: str) -> bool:
        """Delete ``key``; True when it existed."""
        ...

    async def has_value(self, scope: Scope, key: str) -> bool:
        """True when ``key`` holds a live value."""
        ...

    async def list_keys(self, scope: Scope) -> list[str]:
        """Every live user key of the session."""
        ...

    async def get_values(self, scope: Scope) -> dict[str, str]:
        """Every live user key and its JSON text, read at one instant."""
        ...

    async def clear_values(self, scope: Scope) -> int:
        """Delete every user key (nothing else); returns how many were live."""
        ...

    async def set_task(self, scope: Scope, fields: dict[str, str], limits: SessionLimits) -> None:
        """Replace the task state with ``fields`` (field -> JSON text)."""
        ...

    async def get_task(self, scope: Scope) -> dict[str, str] | None:
        """The task-state fields, or None when unset."""
        ...

    async def update_task(
        self, scope: Scope, fields: dict[str, str], limits: SessionLimits
    ) -> dict[str, str] | None:
        """Overwrite only ``fields`` if a task state exists; return the whole new state."""
        ...

    async def append_scratchpad(self, scope: Scope, entry: str, limits: SessionLimits) -> None:
        """Append one entry, dropping the oldest past ``limits.max_scratchpad_entries``."""
        ...

    async def get_scratchpad(self, scope: Scope) -> list[str]:
        """Scratchpad entries, oldest first."""
        ...

    async def clear_scratchpad(self, scope: Scope) -> int:
        """Empty the scratchpad; returns how many entries it held."""
        ...

    async def remove_scratchpad_entries(self, scope: Scope, entries: list[str]) -> int:
        """Remove one occurrence of each of ``entries`` (as stored) in one step; how many went.

        Entries appended meanwhile, and entries not among ``entries``, stay.
        """
        ...

    async def snapshot(self, scope: Scope) -> SessionSnapshot:
        """Read user keys, task state and scratchpad at one instant."""
        ...

    async def restore(self, scope: Scope, snapshot: SessionSnapshot, limits: SessionLimits) -> None:
        """Replace the session's whole state with ``snapshot`` in one step."""
        ...

    async def stats(self, scope: Scope) -> SessionStats:
        """Counts for ``get_stats``."""
        ...

    async def erase_sessions(self, scope: Scope, *, descendants: bool) -> int:
        """Drop every session that is ``scope`` (or nested under it); returns how many.

        Not atomic across sessions: a session written while this runs may
        survive it (erasure documents this and is run again).
        """
        ...

    async def count_state(self, scope: Scope, *, descendants: bool) -> int:
        """How many keys of the sessions of ``scope`` (or nested under it) still exist."""
        ...

    def describe(self) -> str:
        """Where the shared state lives (``redis at <url>``), for receipts and messages."""
        ...

    async def reach(self) -> str:
        """Make sure the store that other processes share answers; returns :meth:`describe`.

        For operations that must reach the real store (erasure): Redis is
        pinged within a bound. Raises
        :class:`~memsvc.core.errors.RedisUnavailableError` when it does not answer.
        """
        ...

    async def ping(self) -> bool:
        """True when the backend answers; never raises."""
        ...

    async def close(self) -> None:
        """Release connections; the store is unusable afterwards."""
        ...
