"""Read routing: reads to healthy streaming replicas, writes to the primary.

A :class:`ReadRouter` holds one pool per replica (``Settings.replica_urls``)
next to the primary's. Repositories hand it their reads; it picks a replica
round robin and runs the read there, or tells the caller to use the primary.

- **Read-your-writes** (``Settings.read_your_writes``, on by default): after
  each write the service commits, the primary's WAL position is recorded
  (:meth:`ReadRouter.after_write`). A later read runs on a replica only once
  the replica has replayed that position, waiting at most
  ``replica_wait_s``; otherwise it runs on the primary.
- **Freshness**: a replica is checked when first used and then every
  ``replica_check_interval_s`` on the connection the read already holds. It
  may serve reads only while it is a standby, its WAL receiver is streaming
  (``pg_stat_wal_receiver``: a replica whose receiver stopped has replayed
  all it received and would otherwise look current for ever), and the last
  commit it replayed is within ``replica_max_lag_s`` of the primary's clock
  (read from the primary at each check, with its flushed WAL position: a
  replica that has replayed that position lags 0); otherwise it is skipped
  until the next check. One that cannot be reached, or whose connection
  breaks, is skipped for ``replica_retry_s``.
- **Reads never fail because of a replica**: any storage failure on a replica
  sends the read to the primary.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, TypeVar
from urllib.parse import urlsplit

import asyncpg

from memsvc.core.errors import ConcurrencyError, MemsvcError, SchemaError, StorageError
from memsvc.core.settings import Settings
from memsvc.db import replica_queries as q
from memsvc.db.errors import connection_is_broken, translate_errors
from memsvc.db.pool import create_pool

log = logging.getLogger(__name__)

T = TypeVar("T")

# What a read on a replica can run into that the primary may not: the replica
# is down or broke mid-read, its copy of the schema is behind, or replay
# cancelled the read (a recovery conflict, SQLSTATE 40001).
_REPLICA_FAILURES = (StorageError, ConcurrencyError, SchemaError)
_DRIVER_FAILURES = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)
# Polling a replica's replay position while a read waits for it.
_FIRST_POLL_S = 0.001
_MAX_POLL_S = 0.01


class _Unusable(Exception):
    """This replica cannot serve this read; try another or the primary."""


class _Behind(Exception):
    """The replica has not replayed the service's writes in time: use the primary."""


def replica_name(url: str) -> str:
    """A replica's URL without credentials, for logs and status."""
    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    port = f":{parts.port}" if parts.port else ""
    return f"{host}{port}{parts.path}"


@dataclass
class ReplicaStatus:
    """What the router knows of one replica (see :meth:`ReadRouter.status`)."""

    name: str
    state: str  # "unchecked", "ok", "down", "lagging", "not receiving" or "not a standby"
    replayed: int  # WAL position replayed at the last look (bytes), -1 if unknown
    reads: int  # reads it has served


def freshness(row: Any, max_lag_s: float) -> str:
    """A :data:`~memsvc.db.replica_queries.REPLICA_STATE` row's verdict.

    ``"ok"`` (it may serve reads), ``"not a standby"``, ``"not receiving"``
    (no streaming WAL receiver) or ``"lagging"``. A receiver whose status the
    role may not see (without pg_read_all_stats) counts as streaming: the
    lag, measured on the primary's clock, still bounds what such a replica
    can miss.
    """
    if not row["standby"]:
        return "not a standby"
    if row["receiver"] not in ("streaming", "unknown"):
        return "not receiving"
    if row["lag_s"] is None or row["lag_s"] > max_lag_s:
        return "lagging"
    return "ok"


class PrimaryState(NamedTuple):
    """The primary's clock, flushed WAL position and newest commit: REPLICA_STATE's arguments."""

    now: datetime
    flushed: int
    last_commit: datetime | None


async def primary_state(conn: asyncpg.Connection) -> PrimaryState:
    """The primary's state a replica's freshness is measured against."""
    row = await conn.fetchrow(q.PRIMARY_STATE)
    return PrimaryState(row["now"], int(row["flushed"]), row["last_commit"])


class _Replica:
    def __init__(self, name: str, pool: asyncpg.Pool) -> None:
        self.name = name
        self.pool = pool
        self.replayed = -1
        self.checked_at = -float("inf")
        self.skip_until = 0.0
        self.state = "unchecked"
        self.reads = 0


class ReadRouter:
    """Chooses where each read runs: a healthy replica or the primary.

    The service has one (``svc.reads``). Without replicas every read runs on
    the primary and nothing is tracked.
    """

    def __init__(self, primary: asyncpg.Pool, settings: Settings, replicas: list[_Replica]) -> None:
        self._primary = primary
        self._settings = settings
        self._replicas = replicas
        self._next = 0
        # The highest WAL position of a write this service committed. Writes
        # whose position was not seen bump ``_unknown``; ``_known`` is the
        # newest such bump a position read from the primary since covers.
        self._written = 0
        self._unknown = 0
        self._known = 0
        self.primary_reads = 0

    @classmethod
    async def open(
        cls, primary: asyncpg.Pool, settings: Settings, vector_schema: str
    ) -> ReadRouter:
        """A router with a pool per configured replica.

        Replica pools connect on first use (``min_size`` 0), so a replica that
        is down when the service opens is skipped, not fatal.
        """
        replicas: list[_Replica] = []
        pool_settings = settings.model_copy(update={"pool_min_size": 0})
        try:
            for url in settings.replica_urls:
                pool = await create_pool(url, pool_settings, vector_schema)
                replicas.append(_Replica(replica_name(url), pool))
        except BaseException:
            for replica in replicas:
                await replica.pool.close()
            raise
        return cls(primary, settings, replicas)

    @property
    def has_replicas(self) -> bool:
        """Whether any replica is configured."""
        return bool(self._replicas)

    @property
    def tracks_writes(self) -> bool:
        """Whether writes must record their WAL position (replicas and read-your-writes)."""
        return self.has_replicas and self._settings.read_your_writes

    # ------------------------------------------------------------- writes

    async def after_write(self, conn: asyncpg.Connection) -> None:
        """Record the WAL position of a write just committed on ``conn`` (the primary)."""
        try:
            with translate_errors():
                position = await conn.fetchval(q.WRITE_POSITION)
        except MemsvcError:
            # The write committed but its position is unknown: the next read
            # asks the primary for its current one instead.
            self.wrote_elsewhere()
            return
        self._written = max(self._written, int(position))

    def wrote_elsewhere(self) -> None:
        """A write this service made may have committed without its position being recorded.

        Call it after committing writes of your own (``conn=`` transactions,
        statements on ``svc.pool``): the next read then asks the primary for
        its current WAL position and waits for that. memsvc calls it when a
        write raises (it may still have committed) and after maintenance
        writes (gc, imports).
        """
        self._unknown += 1

    # -------------------------------------------------------------- reads

    async def run(
        self,
        statement: Callable[[asyncpg.Connection], Awaitable[T]],
        on_primary: Callable[[], Awaitable[T]],
    ) -> T:
        """Run a read on a replica that may serve it, else ``on_primary()``.

        ``statement`` runs on a replica connection (driver errors inside it
        are translated here); ``on_primary`` is the caller's own way of
        running the read on the primary, with its retries.
        """
        target = await self._target()
        if target is not None:
            for replica in self._rotation():
                try:
                    return await self._on_replica(replica, statement, target)
                except _Unusable:
                    continue
                except _Behind:
                    break
        self.primary_reads += 1
        return await on_primary()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[asyncpg.Connection]:
        """A connection to read from: a replica that may serve reads now, else the primary.

        For readers that hold a connection (a change feed, an app's own
        queries). Read-your-writes applies as in every memsvc read. A failure
        inside the block is the caller's: only choosing the connection falls
        back to the primary.
        """
        target = await self._target()
        if target is not None:
            for replica in self._rotation():
                try:
                    conn = await self._ready_connection(replica, target)
                except _Unusable:
                    continue
                except _Behind:
                    break
                try:
                    replica.reads += 1
                    yield conn
                finally:
                    await replica.pool.release(conn)
                return
        self.primary_reads += 1
        async with self._primary.acquire() as conn:
            yield conn

    def status(self) -> list[ReplicaStatus]:
        """Each replica's last known state and how many reads it served."""
        return [ReplicaStatus(r.name, r.state, r.replayed, r.reads) for r in self._replicas]

    async def close(self) -> None:
        """Close the replica pools (the primary's belongs to the service)."""
        for replica in self._replicas:
            await replica.pool.close()

    # ----------------------------------------------------------- internals

    async def _target(self) -> int | None:
        """The WAL position a replica must have replayed for the next read.

        0 when nothing needs waiting for; None when a read must go to the
        primary (no replica, or the position of a write is unknown and the
        primary cannot say its own).
        """
        if not self._replicas:
            return None
        if not self._settings.read_your_writes:
            return 0
        if self._known != self._unknown:
            # Every read until a position fetched after the latest unknown
            # write is recorded asks for one itself, so none reads older data.
            bump = self._unknown
            try:
                with translate_errors():
                    async with self._primary.acquire() as conn:
                        position = await conn.fetchval(q.WRITE_POSITION)
            except MemsvcError:
                return None
            self._written = max(self._written, int(position))
            self._known = max(self._known, bump)
        return self._written

    def _rotation(self) -> list[_Replica]:
        """The replicas not being skipped, round robin from the next one's turn."""
        now = time.monotonic()
        count = len(self._replicas)
        start = self._next
        self._next = (start + 1) % count
        order = [self._replicas[(start + i) % count] for i in range(count)]
        return [replica for replica in order if replica.skip_until <= now]

    async def _on_replica(
        self,
        replica: _Replica,
        statement: Callable[[asyncpg.Connection], Awaitable[T]],
        target: int,
    ) -> T:
        conn = await self._ready_connection(replica, target)
        try:
            with translate_errors():
                result = await statement(conn)
        except _REPLICA_FAILURES as exc:
            self._failed(replica, conn, exc)
            raise _Unusable from exc
        else:
            conn.mark_clean()
        finally:
            await _release(replica, conn)
        replica.reads += 1
        return result

    async def _ready_connection(self, replica: _Replica, target: int) -> Any:
        """A connection to ``replica`` once it may serve a read that must see ``target``."""
        pool = replica.pool
        if not pool.get_idle_size() and pool.get_size() >= pool.get_max_size():
            # Every connection is in use: the read goes elsewhere at once
            # rather than waiting for one (busy is not down).
            raise _Unusable
        try:
            with translate_errors():
                async with asyncio.timeout(self._settings.connect_timeout_s):
                    conn = await replica.pool.acquire()
        except _REPLICA_FAILURES as exc:
            busy = replica.pool.get_size() >= replica.pool.get_max_size()
            if not (busy and isinstance(exc.__cause__, TimeoutError)):
                self._skip(replica, "down", self._settings.replica_retry_s, exc)
            # else every connection was in use: busy is not down, this read goes elsewhere.
            raise _Unusable from exc
        try:
            with translate_errors():
                await self._check(replica, conn)
                await self._wait_for(replica, conn, target)
        except _REPLICA_FAILURES as exc:
            self._failed(replica, conn, exc)
            await _release(replica, conn)
            raise _Unusable from exc
        except BaseException:
            conn.mark_clean()
            await _release(replica, conn)
            raise
        return conn

    async def _check(self, replica: _Replica, conn: asyncpg.Connection) -> None:
        """Refresh the replica's health when it is due; _Unusable when it must be skipped."""
        now = time.monotonic()
        interval = self._settings.replica_check_interval_s
        if now - replica.checked_at < interval:
            return
        row = await conn.fetchrow(q.REPLICA_STATE, *await self._primary_state())
        replica.checked_at = now
        if row["standby"]:
            replica.replayed = max(replica.replayed, _position(row["replayed"]))
        # A promoted replica takes writes of its own: its data is not the primary's.
        state = freshness(row, self._settings.replica_max_lag_s)
        if state != "ok":
            self._skip(replica, state, interval)
            raise _Unusable
        replica.state = "ok"

    async def _primary_state(self) -> PrimaryState:
        """The primary's clock, flushed position and newest commit; _Unusable when it cannot say.

        A read then goes to the primary, which reports its own failure.
        """
        try:
            with translate_errors():
                async with asyncio.timeout(self._settings.connect_timeout_s):
                    async with self._primary.acquire() as conn:
                        return await primary_state(conn)
        except MemsvcError as exc:
            raise _Unusable from exc

    async def _wait_for(self, replica: _Replica, conn: asyncpg.Connection, target: int) -> None:
        """Return once the replica has replayed ``target``; _Behind past ``replica_wait_s``."""
        if replica.replayed >= target:
            return
        deadline = time.monotonic() + self._settings.replica_wait_s
        delay = _FIRST_POLL_S
        while True:
            replica.replayed = max(replica.replayed, _position(await conn.fetchval(q.REPLAYED)))
            if replica.replayed >= target:
                return
            if time.monotonic() + delay > deadline:
                raise _Behind
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_POLL_S)

    def _failed(self, replica: _Replica, conn: asyncpg.Connection, exc: BaseException) -> None:
        if connection_is_broken(exc):
            # A connection the server dropped is already detached from its proxy.
            with contextlib.suppress(asyncpg.InterfaceError):
                conn.terminate()
            self._skip(replica, "down", self._settings.replica_retry_s, exc)
        else:
            log.info("read on replica %s failed, running it on the primary: %s", replica.name, exc)

    def _skip(
        self, replica: _Replica, state: str, seconds: float, exc: BaseException | None = None
    ) -> None:
        if replica.state != state:
            log.warning(
                "replica %s is %s%s; reads go elsewhere for %.1f s",
                replica.name,
                state,
                f" ({exc})" if exc is not None else "",
                seconds,
            )
        replica.state = state
        replica.skip_until = time.monotonic() + seconds
        # Checked again on its next use.
        replica.checked_at = -float("inf")


def _position(value: object) -> int:
    # NULL before a standby has replayed anything.
    return -1 if value is None else int(str(value))


async def _release(replica: _Replica, conn: asyncpg.Connection) -> None:
    # Releasing a connection that broke may itself fail; it is gone either way.
    with contextlib.suppress(*_DRIVER_FAILURES):
        await replica.pool.release(conn)
