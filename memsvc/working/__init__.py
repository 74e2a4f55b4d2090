"""Working memory: ephemeral, session-scoped state on Redis or in process.

``WorkingMemory`` is the API; a ``WorkingStore`` (``RedisStore`` or
``LocalStore``) holds the state, and :func:`open_working_store` picks one from
the settings. ``RedisStore`` is imported on first use, so the in-process path
does not load redis-py. The protocol module (``store``) imports none of its
implementations: :mod:`memsvc.working.opening` makes the choice.

May import: ``memsvc.core``, ``memsvc.db``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memsvc.working.local_store import LocalStore
from memsvc.working.memory import CheckpointRepository, WorkingMemory
from memsvc.working.opening import open_working_store
from memsvc.working.store import (
    SessionLimits,
    SessionSnapshot,
    SessionStats,
    WorkingStore,
)

if TYPE_CHECKING:
    from memsvc.working.redis_store import RedisStore

__all__ = [
    "CheckpointRepository",
    "LocalStore",
    "RedisStore",
    "SessionLimits",
    "SessionSnapshot",
    "SessionStats",
    "WorkingMemory",
    "WorkingStore",
    "open_working_store",
]


def __getattr__(name: str) -> Any:
    if name == "RedisStore":
        from memsvc.working.redis_store import RedisStore

        return RedisStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
