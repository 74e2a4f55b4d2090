"""In-process working-memory store: a dict of sessions behind one lock.

Used when no ``redis_url`` is set (or as the fallback when Redis is down). It
has the same semantics as :class:`~memsvc.working.redis_store.RedisStore`:
per-key TTLs, bounded keys and scratchpad, idle expiry of session state.

Each operation holds a :class:`threading.Lock` from start to end and never
awaits while holding it, so operations are atomic both between asyncio tasks
and between threads (each running its own event loop, or sync code). Memory is
bounded: past ``working_memory_max_sessions`` the least recently used session
is dropped whole.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from datetime import UTC, datetime

from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.working.keys import in_scope
from memsvc.working.store import SessionLimits, SessionSnapshot, SessionStats

_monotonic = time.monotonic


def _now_iso() -> str:
    return datetime.now(UTC).isoformat()


class _Session:
    """One session's state; only touched with the store's lock held."""

    __slots__ = ("created_at", "deadlines", "scratchpad", "state_deadline", "task", "values")

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        # Monotonic expiry per user key; keys without a TTL are absent.
        self.deadlines: dict[str, float] = {}
        self.task: dict[str, str] | None = None
        self.scratchpad: deque[str] = deque()
        self.created_at: str | None = None
        # When task state, scratchpad and metadata expire (idle TTL), if ever.
        self.state_deadline: float | None = None

    def expire_state(self, now: float) -> None:
        if self.state_deadline is not None and self.state_deadline <= now:
            self.task = None
            self.scratchpad.clear()
            self.created_at = None
            self.state_deadline = None

    def purge(self, now: float) -> None:
        """Drop expired user keys."""
        if self.deadlines:
            expired = [key for key, deadline in self.deadlines.items() if deadline <= now]
            for key in expired:
                del self.deadlines[key]
                del self.values[key]

    def is_live(self, key: str, now: float) -> bool:
        """True if ``key`` holds a value that has not expired (expired ones are dropped)."""
        if key not in self.values:
            return False
        deadline = self.deadlines.get(key)
        if deadline is not None and deadline <= now:
            del self.deadlines[key]
            del self.values[key]
            return False
        return True

    def touch(self, limits: SessionLimits, now: float) -> None:
        if self.created_at is None:
            self.created_at = _now_iso()
        if limits.idle_ttl_ms is not None:
            self.state_deadline = now + limits.idle_ttl_ms / 1000


class LocalStore:
    """A :class:`~memsvc.working.store.WorkingStore` kept in this process.

    State is not shared between processes and is lost on exit; use Redis
    (``redis_url``) for anything that must survive the process or be shared.

    Args:
        settings: Reads ``working_memory_max_sessions`` (LRU bound).
        using_fallback: Set by :func:`open_working_store` when this store
            stands in for an unreachable Redis.
    """

    def __init__(self, settings: Settings | None = None, *, using_fallback: bool = False) -> None:
        self._max_sessions = (settings or Settings()).working_memory_max_sessions
        self._using_fallback = using_fallback
        self._lock = threading.Lock()
        self._sessions: OrderedDict[Scope, _Session] = OrderedDict()
        # The most recently used session: moving it to the end again is a
        # no-op, and skipping it saves a hash of the scope on hot loops.
        self._last: _Session | None = None

    @property
    def backend(self) -> str:
        """Always ``"local"``."""
        return "local"

    @property
    def using_fallback(self) -> bool:
        """True when this store replaces an unreachable Redis."""
        return self._using_fallback

    @property
    def session_count(self) -> int:
        """How many sessions are held (at most ``working_memory_max_sessions``)."""
        with self._lock:
            return len(self._sessions)

    # --- helpers (lock held) -------------------------------------------------
    def _find(self, scope: Scope) -> _Session | None:
        session = self._sessions.get(scope)
        if session is not None and session is not self._last:
            self._sessions.move_to_end(scope)
            self._last = session
        return session

    def _open(self, scope: Scope) -> _Session:
        session = self._find(scope)
        if session is not None:
            return session
        session = self._sessions[scope] = self._last = _Session()
        while len(self._sessions) > self._max_sessions:
            self._sessions.popitem(last=False)
        return session

    # --- user keys -----------------------------------------------------------
    async def set_value(
        self, scope: Scope, key: str, value: str, ttl_ms: int | None, limits: SessionLimits
    ) -> bool:
        """Store ``value``; False (nothing written) when the session is full."""
        with self._lock:
            now = _monotonic()
            session = self._open(scope)
            values = session.values
            if key not in values and len(values) >= limits.max_keys:
                session.purge(now)
                if len(values) >= limits.max_keys:
                    return False
            values[key] = value
            if ttl_ms is None:
                session.deadlines.pop(key, None)
            else:
                session.deadlines[key] = now + ttl_ms / 1000
            session.touch(limits, now)
            return True

    async def get_value(self, scope: Scope, key: str) -> str | None:
        """The JSON text under ``key``, or None."""
        with self._lock:
            session = self._find(scope)
            if session is None or not session.is_live(key, _monotonic()):
                return None
            return session.values[key]

    async def delete_value(self, scope: Scope, key: str) -> bool:
        """Delete ``key``; True when it was live."""
        with self._lock:
            session = self._find(scope)
            if session is None:
                return False
            live = session.is_live(key, _monotonic())
            if live:
                del session.values[key]
                session.deadlines.pop(key, None)
            return live

    async def has_value(self, scope: Scope, key: str) -> bool:
        """True when ``key`` holds a live value."""
        with self._lock:
            session = self._find(scope)
            return session is not None and session.is_live(key, _monotonic())

    async def list_keys(self, scope: Scope) -> list[str]:
        """Every live user key."""
        with self._lock:
            session = self._find(scope)
            if session is None:
                return []
            session.purge(_monotonic())
            return list(session.values)

    async def get_values(self, scope: Scope) -> dict[str, str]:
        """Every live user key and its JSON text."""
        with self._lock:
            session = self._find(scope)
            if session is None:
                return {}
            session.purge(_monotonic())
            return dict(session.values)

    async def clear_values(self, scope: Scope) -> int:
        """Delete every user key; returns how many were live."""
        with self._lock:
            session = self._find(scope)
            if session is None:
                return 0
            session.purge(_monotonic())
            count = len(session.values)
            session.values.clear()
            session.deadlines.clear()
            return count

    # --- task state ----------------------------------------------------------
    async def set_task(self, scope: Scope, fields: dict[str, str], limits: SessionLimits) -> None:
        """Replace the task state."""
        with self._lock:
            now = _monotonic()
            session = self._open(scope)
            session.expire_state(now)
            session.task = dict(fields)
            session.touch(limits, now)

    async def get_task(self, scope: Scope) -> dict[str, str] | None:
        """The task-state fields, or None."""
        with self._lock:
            session = self._find(scope)
            if session is None:
                return None
            session.expire_state(_monotonic())
            return None if session.task is None else dict(session.task)

    async def update_task(
        self, scope: Scope, fields: dict[str, str], limits: SessionLimits
    ) -> dict[str, str] | None:
        """Overwrite ``fields`` of an existing task state; return the new state."""
        with self._lock:
            now = _monotonic()
            session = self._find(scope)
            if session is None:
                return None
            session.expire_state(now)
            if session.task is None:
                return None
            session.task.update(fields)
            session.touch(limits, now)
            return dict(session.task)

    # --- scratchpad ----------------------------------------------------------
    async def append_scratchpad(self, scope: Scope, entry: str, limits: SessionLimits) -> None:
        """Append one entry, keeping the newest ``max_scratchpad_entries``."""
        with self._lock:
            now = _monotonic()
            session = self._open(scope)
            session.expire_state(now)
            pad = session.scratchpad
            pad.append(entry)
            while len(pad) > limits.max_scratchpad_entries:
                pad.popleft()
            session.touch(limits, now)

    async def get_scratchpad(self, scope: Scope) -> list[str]:
        """Scratchpad entries, oldest first."""
        with self._lock:
            session = self._find(scope)
            if session is None:
                return []
            session.expire_state(_monotonic())
            return list(session.scratchpad)

    async def clear_scratchpad(self, scope: Scope) -> int:
        """Empty the scratchpad; returns how many entries it held."""
        with self._lock:
            session = self._find(scope)
            if session is None:
                return 0
            session.expire_state(_monotonic())
            count = len(session.scratchpad)
            session.scratchpad.clear()
            return count

    async def remove_scratchpad_entries(self, scope: Scope, entries: list[str]) -> int:
        """Remove one occurrence of each of ``entries``, under the lock; how many went."""
        with self._lock:
            session = self._find(scope)
            if session is None:
                return 0
            session.expire_state(_monotonic())
            removed = 0
            for entry in entries:
                try:
                    session.scratchpad.remove(entry)
                except ValueError:
                    continue
                removed += 1
            return removed

    # --- whole session ---------------------------------------------------------
    async def snapshot(self, scope: Scope) -> SessionSnapshot:
        """User keys (with remaining TTLs), task state and scratchpad, under one lock."""
        with self._lock:
            session = self._find(scope)
            if session is None:
                return SessionSnapshot(values={}, task=None, scratchpad=[])
            now = _monotonic()
            session.expire_state(now)
            session.purge(now)
            values: dict[str, tuple[str, int | None]] = {}
            for key, value in session.values.items():
                deadline = session.deadlines.get(key)
                remaining = None if deadline is None else max(1, int((deadline - now) * 1000))
                values[key] = (value, remaining)
            return SessionSnapshot(
                values=values,
                task=None if session.task is None else dict(session.task),
                scratchpad=list(session.scratchpad),
            )

    async def restore(self, scope: Scope, snapshot: SessionSnapshot, limits: SessionLimits) -> None:
        """Replace the whole session with ``snapshot`` under one lock."""
        # Build the new session before taking the lock, then swap it in: readers
        # see either the old object or the complete new one.
        now = _monotonic()
        fresh = _Session()
        for key, (value, ttl_ms) in snapshot.values.items():
            fresh.values[key] = value
            if ttl_ms is not None:
                fresh.deadlines[key] = now + ttl_ms / 1000
        fresh.task = None if snapshot.task is None else dict(snapshot.task)
        fresh.scratchpad.extend(snapshot.scratchpad[-limits.max_scratchpad_entries :])
        with self._lock:
            old = self._find(scope)
            fresh.created_at = old.created_at if old is not None else None
            fresh.touch(limits, now)
            self._sessions[scope] = self._last = fresh
            self._sessions.move_to_end(scope)
            while len(self._sessions) > self._max_sessions:
                self._sessions.popitem(last=False)

    async def stats(self, scope: Scope) -> SessionStats:
        """Counts for ``get_stats``."""
        with self._lock:
            session = self._find(scope)
            if session is None:
                return SessionStats(0, 0, False, None)
            now = _monotonic()
            session.expire_state(now)
            session.purge(now)
            return SessionStats(
                user_keys=len(session.values),
                scratchpad_entries=len(session.scratchpad),
                has_task_state=session.task is not None,
                created_at=session.created_at,
            )

    async def erase_sessions(self, scope: Scope, *, descendants: bool) -> int:
        """Drop the sessions of ``scope`` (and, with ``descendants``, those under it)."""
        with self._lock:
            doomed = [s for s in self._sessions if in_scope(s, scope, descendants=descendants)]
            for session in doomed:
                if self._sessions.pop(session) is self._last:
                    self._last = None
            return len(doomed)

    async def count_state(self, scope: Scope, *, descendants: bool) -> int:
        """What of the sessions of ``scope`` is left, counted as Redis keys would be.

        A user value is one key; the index of values, task state, scratchpad
        and session metadata one each.
        """
        now = _monotonic()
        count = 0
        with self._lock:
            for name, session in self._sessions.items():
                if not in_scope(name, scope, descendants=descendants):
                    continue
                session.purge(now)
                session.expire_state(now)
                count += len(session.values) + bool(session.values)
                count += (session.task is not None) + bool(session.scratchpad)
                count += session.created_at is not None
        return count

    def describe(self) -> str:
        """Where the state lives, for receipts."""
        return "this process's store (no redis_url)"

    async def reach(self) -> str:
        """Nothing to reach: the state lives in this process."""
        return self.describe()

    # --- lifecycle -------------------------------------------------------------
    async def ping(self) -> bool:
        """Always True: the store lives in this process."""
        return True

    async def close(self) -> None:
        """Drop every session."""
        with self._lock:
            self._sessions.clear()
            self._last = None
