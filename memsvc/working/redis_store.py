"""Working-memory store on Redis (standalone or Redis Cluster), via redis-py asyncio.

Every write is one Lua script (see :mod:`memsvc.working.redis_scripts`), so no
operation reads, computes in Python and writes back. Single-key reads (GET,
EXISTS, LRANGE, HGETALL) go straight to Redis.

Failures are reported quickly and never retried: the connection pool uses the
``redis_timeout_s`` socket timeouts and no retry policy, so a dead server
surfaces as :class:`~memsvc.core.errors.WorkingMemoryError` within about that
timeout instead of after redis-py's default multi-second backoff.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime
from typing import Any, ParamSpec, TypeVar, cast
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError
from redis.retry import Retry

from memsvc.core.errors import RedisUnavailableError, WorkingMemoryError
from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.working import redis_scripts
from memsvc.working.keys import scope_key_pattern, session_keys
from memsvc.working.store import SessionLimits, SessionSnapshot, SessionStats

_P = ParamSpec("_P")
_T = TypeVar("_T")

_CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}

# A pool that is merely busy should make callers queue, not fail; a dead server
# holds no connections, so this wait is not on the failure-detection path.
_POOL_WAIT_FACTOR = 5

# Keys SCAN returns per call, and sessions erased per round of scripts.
SCAN_PAGE = 1000
# reach(): pings before giving up, and the pause after the first (then longer).
REACH_ATTEMPTS = 3
REACH_PAUSE_S = 0.2


def _translate_errors(
    method: Callable[_P, Coroutine[Any, Any, _T]],
) -> Callable[_P, Coroutine[Any, Any, _T]]:
    """Turn any redis-py or socket failure into WorkingMemoryError (cause kept)."""

    @functools.wraps(method)
    async def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return await method(*args, **kwargs)
        except (RedisError, OSError, TimeoutError) as exc:
            raise WorkingMemoryError(
                f"Redis working-memory operation {method.__name__} failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    return wrapper


def _epoch_ms_to_iso(value: str | None) -> str | None:
    if not value:
        return None
    return datetime.fromtimestamp(int(value) / 1000, UTC).isoformat()


def _pairs(flat: list[str]) -> dict[str, str]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + netloc))


class RedisStore:
    """A :class:`~memsvc.working.store.WorkingStore` on Redis.

    Build it with :meth:`from_url`. A URL with scheme ``redis+cluster://`` (or
    ``rediss+cluster://``), or ``cluster=True``, selects redis-py's
    ``RedisCluster`` client; the URL then names any one node of the cluster.
    Every key of a session carries the same hash tag, so all of a session's
    operations run on one node.

    Like the redis-py asyncio client it wraps, a RedisStore belongs to the
    event loop that first uses it; threads with their own loops need their
    own store (the in-process LocalStore, by contrast, is shared freely).
    """

    def __init__(
        self,
        client: Redis | RedisCluster,
        *,
        display_url: str = "redis",
        owns_client: bool = True,
    ) -> None:
        self._client = client
        self._owns_client = owns_client
        self.display_url = display_url
        """The URL with any password masked, for messages and logs."""
        register = client.register_script
        self._set_value = register(redis_scripts.SET_VALUE)
        self._delete_value = register(redis_scripts.DELETE_VALUE)
        self._list_keys = register(redis_scripts.LIST_KEYS)
        self._get_values = register(redis_scripts.GET_VALUES)
        self._clear_values = register(redis_scripts.CLEAR_VALUES)
        self._set_task = register(redis_scripts.SET_TASK)
        self._update_task = register(redis_scripts.UPDATE_TASK)
        self._append_scratchpad = register(redis_scripts.APPEND_SCRATCHPAD)
        self._clear_scratchpad = register(redis_scripts.CLEAR_SCRATCHPAD)
        self._remove_scratchpad = register(redis_scripts.REMOVE_SCRATCHPAD)
        self._snapshot = register(redis_scripts.SNAPSHOT)
        self._restore = register(redis_scripts.RESTORE)
        self._stats = register(redis_scripts.STATS)
        self._erase_session = register(redis_scripts.ERASE_SESSION)

    @classmethod
    def from_url(cls, url: str, settings: Settings, *, cluster: bool = False) -> RedisStore:
        """Connect (lazily) to ``url`` with memsvc's pool and timeout settings.

        Args:
            url: ``redis://``, ``rediss://`` or ``unix://`` for one server;
                ``redis+cluster://host:port`` for a Redis Cluster.
            settings: ``redis_timeout_s`` (connect and read timeouts) and
                ``redis_max_connections`` (pool size; per node for a cluster).
            cluster: Use the cluster client even with a plain ``redis://`` URL.
        """
        scheme, sep, rest = url.partition("://")
        if scheme in _CLUSTER_SCHEMES:
            url, cluster = f"{_CLUSTER_SCHEMES[scheme]}{sep}{rest}", True
        timeout = settings.redis_timeout_s
        client: Redis | RedisCluster
        if cluster:
            client = RedisCluster.from_url(
                url,
                max_connections=settings.redis_max_connections,
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
                retry=Retry(NoBackoff(), 0),
                decode_responses=True,
            )
        else:
            pool = BlockingConnectionPool.from_url(
                url,
                max_connections=settings.redis_max_connections,
                timeout=timeout * _POOL_WAIT_FACTOR,
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
                retry=Retry(NoBackoff(), 0),
                decode_responses=True,
            )
            # from_pool: closing the client also closes its pool's connections.
            client = Redis.from_pool(pool)
        return cls(client, display_url=_redact(url))

    @property
    def backend(self) -> str:
        """Always ``"redis"``."""
        return "redis"

    @property
    def using_fallback(self) -> bool:
        """Always False: a RedisStore is never a fallback."""
        return False

    @property
    def client(self) -> Redis | RedisCluster:
        """The underlying redis-py client (for tests and operations tooling)."""
        return self._client

    # Plain functions returning the script's awaitable: no extra coroutine
    # frame on the hot path.
    def _write(
        self, script: AsyncScript, scope: Scope, limits: SessionLimits, *args: str | int
    ) -> Awaitable[Any]:
        """Run a script that writes session state (it needs the idle TTL)."""
        index = session_keys(scope).index
        return script([index], [limits.idle_ttl_ms or 0, *args])

    def _read(self, script: AsyncScript, scope: Scope, *args: str | int) -> Awaitable[Any]:
        """Run a script that does not refresh the session's idle TTL."""
        return script([session_keys(scope).index], [0, *args])

    # --- user keys -----------------------------------------------------------
    @_translate_errors
    async def set_value(
        self, scope: Scope, key: str, value: str, ttl_ms: int | None, limits: SessionLimits
    ) -> bool:
        """Store ``value``; False (nothing written) when the session is full."""
        written = await self._write(
            self._set_value, scope, limits, key, value, ttl_ms or 0, limits.max_keys
        )
        return bool(written)

    @_translate_errors
    async def get_value(self, scope: Scope, key: str) -> str | None:
        """The JSON text under ``key``, or None."""
        return cast("str | None", await self._client.get(session_keys(scope).value(key)))

    @_translate_errors
    async def delete_value(self, scope: Scope, key: str) -> bool:
        """Delete ``key``; True when it existed."""
        return bool(await self._read(self._delete_value, scope, key))

    @_translate_errors
    async def has_value(self, scope: Scope, key: str) -> bool:
        """True when ``key`` holds a live value."""
        return bool(await self._client.exists(session_keys(scope).value(key)))

    @_translate_errors
    async def list_keys(self, scope: Scope) -> list[str]:
        """Every live user key."""
        return cast("list[str]", await self._read(self._list_keys, scope))

    @_translate_errors
    async def get_values(self, scope: Scope) -> dict[str, str]:
        """Every live user key and its JSON text, in one script."""
        return _pairs(await self._read(self._get_values, scope))

    @_translate_errors
    async def clear_values(self, scope: Scope) -> int:
        """Delete every user key; returns how many were live."""
        return int(await self._read(self._clear_values, scope))

    # --- task state ----------------------------------------------------------
    @staticmethod
    def _flatten(fields: dict[str, str]) -> list[str]:
        return [item for pair in fields.items() for item in pair]

    @_translate_errors
    async def set_task(self, scope: Scope, fields: dict[str, str], limits: SessionLimits) -> None:
        """Replace the task state in one script."""
        await self._write(self._set_task, scope, limits, *self._flatten(fields))

    @_translate_errors
    async def get_task(self, scope: Scope) -> dict[str, str] | None:
        """The task-state fields, or None."""
        fields = await self._client.hgetall(session_keys(scope).task)
        return cast("dict[str, str]", fields) or None

    @_translate_errors
    async def update_task(
        self, scope: Scope, fields: dict[str, str], limits: SessionLimits
    ) -> dict[str, str] | None:
        """HSET only ``fields`` if the task state exists; returns the whole new state."""
        flat = await self._write(self._update_task, scope, limits, *self._flatten(fields))
        return None if flat is None else _pairs(flat)

    # --- scratchpad ----------------------------------------------------------
    @_translate_errors
    async def append_scratchpad(self, scope: Scope, entry: str, limits: SessionLimits) -> None:
        """RPUSH + LTRIM in one script."""
        await self._write(
            self._append_scratchpad, scope, limits, entry, limits.max_scratchpad_entries
        )

    @_translate_errors
    async def get_scratchpad(self, scope: Scope) -> list[str]:
        """Scratchpad entries, oldest first."""
        entries = await self._client.lrange(session_keys(scope).scratchpad, 0, -1)
        return cast("list[str]", entries)

    @_translate_errors
    async def clear_scratchpad(self, scope: Scope) -> int:
        """LLEN + DEL in one script."""
        return int(await self._read(self._clear_scratchpad, scope))

    @_translate_errors
    async def remove_scratchpad_entries(self, scope: Scope, entries: list[str]) -> int:
        """LREM of each entry, once, in one script."""
        if not entries:
            return 0
        return int(await self._read(self._remove_scratchpad, scope, *entries))

    # --- whole session ---------------------------------------------------------
    @_translate_errors
    async def snapshot(self, scope: Scope) -> SessionSnapshot:
        """User keys with remaining TTLs, task state and scratchpad, in one script."""
        flat_values, flat_task, entries = await self._read(self._snapshot, scope)
        values: dict[str, tuple[str, int | None]] = {}
        for i in range(0, len(flat_values), 3):
            pttl = int(flat_values[i + 2])
            values[flat_values[i]] = (flat_values[i + 1], pttl if pttl > 0 else None)
        return SessionSnapshot(
            values=values, task=_pairs(flat_task) or None, scratchpad=list(entries)
        )

    @_translate_errors
    async def restore(self, scope: Scope, snapshot: SessionSnapshot, limits: SessionLimits) -> None:
        """Wipe the session and write ``snapshot`` in one script."""
        args: list[str | int] = [len(snapshot.values)]
        for name, (value, ttl_ms) in snapshot.values.items():
            args += (name, value, ttl_ms or 0)
        if snapshot.task is None:
            args.append(-1)
        else:
            args.append(len(snapshot.task))
            args += self._flatten(snapshot.task)
        args += snapshot.scratchpad[-limits.max_scratchpad_entries :]
        await self._write(self._restore, scope, limits, *args)

    @_translate_errors
    async def stats(self, scope: Scope) -> SessionStats:
        """Counts for ``get_stats``, in one script."""
        keys, entries, has_task, created_at = await self._read(self._stats, scope)
        return SessionStats(
            user_keys=int(keys),
            scratchpad_entries=int(entries),
            has_task_state=bool(has_task),
            created_at=_epoch_ms_to_iso(created_at),
        )

    @_translate_errors
    async def erase_sessions(self, scope: Scope, *, descendants: bool) -> int:
        """Delete every key of the sessions of ``scope``, as a SCAN finds them.

        Streamed: every :data:`SCAN_PAGE` keys found, each session among them
        is deleted whole by one script (one hash tag, one cluster slot), so
        memory stays flat however many sessions there are. A session counts
        once, when its script found keys to delete (SCAN may return a key of
        a session already deleted).
        """
        pattern = scope_key_pattern(scope, descendants=descendants)
        sessions = 0
        found: dict[str, list[str]] = {}
        buffered = 0
        async for key in self._client.scan_iter(match=pattern, count=SCAN_PAGE):
            found.setdefault(key[: key.index("}") + 1], []).append(key)
            buffered += 1
            if buffered >= SCAN_PAGE:
                sessions += await self._erase_found(found)
                found, buffered = {}, 0
        return sessions + await self._erase_found(found)

    async def _erase_found(self, found: dict[str, list[str]]) -> int:
        erased = 0
        for tag, keys in found.items():
            if await self._erase_session([tag + ":idx"], [0, *keys]):
                erased += 1
        return erased

    @_translate_errors
    async def count_state(self, scope: Scope, *, descendants: bool) -> int:
        """How many keys of the sessions of ``scope`` exist (a SCAN, counted as it goes)."""
        pattern = scope_key_pattern(scope, descendants=descendants)
        count = 0
        async for _ in self._client.scan_iter(match=pattern, count=SCAN_PAGE):
            count += 1
        return count

    def describe(self) -> str:
        """Where the state lives, for receipts: ``redis at <url>`` (password masked)."""
        return f"redis at {self.display_url}"

    async def reach(self) -> str:
        """PING until Redis answers, within a bound; raise RedisUnavailableError if it never does.

        For operations that must not be skipped while Redis is briefly down
        (erasure): :data:`REACH_ATTEMPTS` pings, each within
        ``redis_timeout_s``, with short pauses between them.
        """
        for attempt in range(REACH_ATTEMPTS):
            if await self.ping():
                return self.describe()
            if attempt < REACH_ATTEMPTS - 1:
                await asyncio.sleep(REACH_PAUSE_S * (attempt + 1))
        raise RedisUnavailableError(
            f"Redis at {self.display_url} did not answer {REACH_ATTEMPTS} pings in a row "
            "(each within redis_timeout_s); this operation must reach it, never the "
            "in-process fallback: run it again once Redis answers"
        )

    # --- lifecycle -------------------------------------------------------------
    async def ping(self) -> bool:
        """PING with the configured timeout; False on any failure."""
        try:
            return bool(await self._client.ping())
        except (RedisError, OSError, TimeoutError):
            return False

    async def close(self) -> None:
        """Close the client and its connections."""
        if not self._owns_client:
            return
        try:
            await self._client.aclose()
        except (RedisError, OSError, TimeoutError):
            # Closing a client whose server is gone must not fail the caller.
            pass
