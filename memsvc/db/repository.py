"""What every repository shares: connections, transactions, retries."""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Concatenate, ParamSpec, TypeVar

import asyncpg

from memsvc.core.errors import (
    CitusUnsupportedError,
    ConcurrencyError,
    ConflictError,
    MemsvcError,
    NotFoundError,
    StorageError,
    ValidationError,
)
from memsvc.core.settings import Settings
from memsvc.db import cluster_queries
from memsvc.db.cluster import citus_installed
from memsvc.db.errors import DRIVER_ERRORS, connection_is_broken, translate, translate_errors
from memsvc.db.replicas import ReadRouter
from memsvc.db.tenancy import set_tenant
from memsvc.telemetry import waiting_for_connection

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R", bound="Repository")

# feature_not_supported: what Citus answers a statement it cannot distribute.
FEATURE_NOT_SUPPORTED = "0A000"


Method = Callable[Concatenate[R, P], Awaitable[T]]


def citus_limited(operation: str) -> Callable[[Method[R, P, T]], Method[R, P, T]]:
    """Turn Citus refusing a statement of ``operation`` into CitusUnsupportedError naming it.

    On one server the method's errors pass unchanged; on Citus a
    ``feature_not_supported`` answer becomes the typed error, the server's
    message kept as the reason (and the original as ``__cause__``).
    """

    def decorate(method: Method[R, P, T]) -> Method[R, P, T]:
        @functools.wraps(method)
        async def run(self: R, /, *args: P.args, **kwargs: P.kwargs) -> T:
            try:
                return await method(self, *args, **kwargs)
            except StorageError as exc:
                if exc.sqlstate != FEATURE_NOT_SUPPORTED or not await self._on_citus():
                    raise
                raise CitusUnsupportedError(
                    operation, f"Citus cannot run one of its statements as memsvc sends it ({exc})"
                ) from exc

        return run

    return decorate

MAX_ATTEMPTS = 5
# Serialization failure and deadlock: the transaction can simply run again.
RETRY_SQLSTATES = frozenset({"40001", "40P01"})


class Repository:
    """Base of the repositories: runs statements on a pooled or caller-owned connection.

    Every public method takes an optional ``conn``: an asyncpg connection the
    caller owns, usually inside the caller's own transaction, so an app can
    write a memory and its own rows atomically. Repositories never commit or
    roll back a caller's transaction; they use a savepoint when they need
    atomicity inside it.

    With a :class:`~memsvc.db.replicas.ReadRouter` (``reads``), reads made
    through :meth:`_read` without a caller's connection may run on a replica,
    and every block on a pooled connection that may write records the WAL
    position it reached, for read-your-writes.
    """

    # Called after a write method returns (see memsvc.changes.signal).
    _change_listener: Callable[[], None] | None = None
    # Whether the database is a Citus cluster: asked once, when a path differs there.
    _citus: bool | None = None

    def __init__(
        self, pool: asyncpg.Pool, settings: Settings, *, reads: ReadRouter | None = None
    ) -> None:
        self._pool = pool
        self._settings = settings
        self._schema = settings.db_schema
        self._reads = reads

    @asynccontextmanager
    async def _connection(
        self, conn: asyncpg.Connection | None = None, *, tenant: str | None, writes: bool = True
    ) -> AsyncIterator[asyncpg.Connection]:
        """The caller's connection, or one from the pool for the block's duration.

        ``tenant`` is whose rows the block acts on (None: no one tenant's).
        With row-level security on, the block runs in a transaction that
        starts by setting it (see :mod:`memsvc.db.tenancy`), and None is
        refused. ``writes=False`` promises the block only reads (its WAL
        position need not be recorded).
        """
        if self._settings.row_level_security:
            async with self._transaction(conn, tenant=tenant, writes=writes) as active:
                yield active
            return
        if conn is not None:
            with translate_errors():
                yield conn
            return
        with translate_errors():
            async with self._pooled(writes=writes) as pooled:
                yield pooled

    @asynccontextmanager
    async def _pooled(self, *, writes: bool = True) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection for the block; closed instead of pooled if it broke.

        After a block that may have written (and committed: a transaction
        opened on the connection inside the block has ended by now), the WAL
        position is recorded when read-your-writes needs it.
        """
        track = writes and self._reads is not None and self._reads.tracks_writes
        pooled = await self._acquire()
        try:
            yield pooled
            if track:
                assert self._reads is not None
                await self._reads.after_write(pooled)
        except BaseException as exc:
            if track:
                assert self._reads is not None
                self._reads.wrote_elsewhere()
            if connection_is_broken(exc):
                pooled.terminate()
            raise
        else:
            # memsvc's statements leave no session state, so the pool's reset
            # may send nothing for this connection (see memsvc.db.pool).
            pooled.mark_clean()
        finally:
            await self._pool.release(pooled)

    async def _on_pooled(self, statement: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        """``statement`` on a pooled connection, for a read (no WAL position to record)."""
        try:
            pooled = await self._acquire()
            try:
                result = await statement(pooled)
            except BaseException as exc:
                if connection_is_broken(exc):
                    pooled.terminate()
                raise
            else:
                pooled.mark_clean()
            finally:
                await self._pool.release(pooled)
        except MemsvcError:
            raise
        except DRIVER_ERRORS as exc:
            raise translate(exc) from exc
        return result

    async def _on_citus(self) -> bool:
        """Whether the database is a Citus cluster (see :mod:`memsvc.db.cluster`)."""
        if self._citus is None:
            with translate_errors():
                pooled = await self._acquire()
                try:
                    self._citus = await citus_installed(pooled)
                finally:
                    await self._pool.release(pooled)
        return self._citus

    async def _routed(
        self, table: str, row_id: Any, tenant: str | None, conn: asyncpg.Connection | None
    ) -> str | None:
        """``tenant``, or on Citus the tenant of ``table``'s row ``row_id`` when none is given.

        Citus locks rows only in a statement routed to one shard, and an id
        alone names none: the tenant is read first, without a lock (an id in
        several tenants is the ConflictError one server gives; none is
        NotFoundError). On one server, ``tenant`` as it is.
        """
        if tenant is not None or not await self._on_citus():
            return tenant
        async with self._connection(conn, tenant=None, writes=False) as active:
            rows = await active.fetch(cluster_queries.tenants_of_id(self._schema, table), row_id)
        if len(rows) > 1:
            raise ConflictError(f"{table} id {row_id} exists in several tenants")
        if not rows:
            raise NotFoundError(f"{table} id {row_id} not found")
        found: str = rows[0]["tenant_id"]
        return found

    async def _acquire(self) -> Any:
        """A pooled connection, waited for at most ``command_timeout_s``.

        With a connection idle the pool hands it over at once: the deadline
        and the count of waiting operations are for a busy pool. There
        ``asyncio.timeout`` rather than ``acquire(timeout=)``: the latter
        wraps every acquire in ``wait_for``, a new task per call.
        """
        if self._pool.get_idle_size():
            return await self._pool.acquire()
        with waiting_for_connection(self._pool):
            async with asyncio.timeout(self._settings.command_timeout_s):
                return await self._pool.acquire()

    @asynccontextmanager
    async def _transaction(
        self, conn: asyncpg.Connection | None = None, *, tenant: str | None, writes: bool = True
    ) -> AsyncIterator[asyncpg.Connection]:
        """A transaction (or a savepoint inside the caller's transaction) acting for ``tenant``."""
        with translate_errors():
            if conn is not None:
                async with conn.transaction():
                    await self._set_tenant(conn, tenant)
                    yield conn
                return
            async with self._pooled(writes=writes) as pooled, pooled.transaction():
                await self._set_tenant(pooled, tenant)
                yield pooled

    async def _set_tenant(self, conn: asyncpg.Connection, tenant: str | None) -> None:
        """Under row-level security, make ``tenant`` the transaction's; refuse no tenant."""
        if not self._settings.row_level_security:
            return
        if tenant is None:
            raise ValidationError(
                "tenant", "row_level_security is on: pass the scope or tenant= of the rows"
            )
        await conn.execute(set_tenant(tenant))

    async def _read(
        self,
        conn: asyncpg.Connection | None,
        statement: Callable[[asyncpg.Connection], Awaitable[T]],
        *,
        tenant: str | None,
        routed: bool = True,
    ) -> T:
        """Run a read for ``tenant``; on a pooled connection found broken, once more on another.

        Without a caller's connection it may run on a replica (see
        :mod:`memsvc.db.replicas`); the primary serves it whenever no replica
        can. ``routed=False`` keeps it on the primary: reads a write is about
        to act on must not wait for a replica to replay the previous write.
        """

        async def attempt() -> T:
            if conn is None and not self._settings.row_level_security:
                return await self._on_pooled(statement)
            async with self._connection(conn, tenant=tenant, writes=False) as active:
                return await statement(active)

        if routed and conn is None and self._reads is not None and self._reads.has_replicas:
            return await self._reads.run(
                self._scoped(statement, tenant),
                lambda: self._retrying(attempt, owns_transaction=True, idempotent=True),
            )
        return await self._retrying(attempt, owns_transaction=conn is None, idempotent=True)

    def _scoped(
        self, statement: Callable[[asyncpg.Connection], Awaitable[T]], tenant: str | None
    ) -> Callable[[asyncpg.Connection], Awaitable[T]]:
        """``statement`` as it must run on a bare connection (with the tenant set under RLS)."""
        if not self._settings.row_level_security:
            return statement

        async def in_tenant(active: asyncpg.Connection) -> T:
            async with active.transaction():
                await self._set_tenant(active, tenant)
                return await statement(active)

        return in_tenant

    def _run_search(
        self,
        conn: asyncpg.Connection,
        sql: str,
        values: list[object],
        *,
        custom_plan: bool = False,
    ) -> Awaitable[list[Any]]:
        """Run a vector search statement with memsvc's HNSW settings in force.

        Normally they are the connection's startup settings (no round trip),
        and the fetch is returned as it is, without a coroutine around it.
        Behind pgbouncer those are not ours, so they are set for one
        transaction only.

        ``custom_plan``: plan the statement for these values, every time. A
        statement from the connection's cache gets a generic plan after its
        fifth run, one PostgreSQL estimates without the values; for filters
        whose selectivity decides the plan (a metadata filter matching a
        quarter of a scope, estimated at 1%), that plan can be several times
        slower. A statement prepared for this run only is planned with its
        values (one more round trip). Behind pgbouncer no statement is
        cached, so each is planned for its values anyway.
        """
        if not self._settings.pgbouncer:
            if custom_plan:
                return self._run_planned_for_values(conn, sql, values)
            fetched: Awaitable[list[Any]] = conn.fetch(sql, *values)
            return fetched
        return self._run_search_in_transaction(conn, sql, values)

    @staticmethod
    async def _run_planned_for_values(
        conn: asyncpg.Connection, sql: str, values: list[object]
    ) -> list[Any]:
        statement = await conn.prepare(sql)
        rows: list[Any] = await statement.fetch(*values)
        return rows

    async def _run_search_in_transaction(
        self, conn: asyncpg.Connection, sql: str, values: list[object]
    ) -> list[Any]:
        async with conn.transaction():
            await conn.execute(
                f"SET LOCAL hnsw.ef_search = {int(self._settings.hnsw_ef_search)};"
                " SET LOCAL hnsw.iterative_scan = relaxed_order;"
                f" SET LOCAL hnsw.max_scan_tuples = {int(self._settings.hnsw_max_scan_tuples)}"
            )
            rows: list[Any] = await conn.fetch(sql, *values)
        return rows

    @staticmethod
    def _by_id(row_id: object, tenant: str | None) -> tuple[str | None, list[object]]:
        """Arguments of a statement selecting by id (``$1``), optionally within a tenant.

        Returns the tenant's placeholder (``"$2"``, or None for no filter) and
        the argument list.
        """
        return (None, [row_id]) if tenant is None else ("$2", [row_id, tenant])

    @staticmethod
    def _exactly_one(found: int, what: str) -> None:
        """Refuse a lookup by id that matched no row, or rows in several tenants."""
        if found == 0:
            raise NotFoundError(f"{what} not found")
        if found > 1:
            raise ConflictError(f"{what} exists in several tenants; pass tenant=")

    @staticmethod
    def _versioned_outcome(row: Any, what: str, expected_version: int | None) -> Any:
        """Check the row a version-guarded update statement returned.

        Such statements report how many rows matched the id (``found``), the
        version they held (``prior_version``), and the updated row's columns
        (``id`` is NULL when the expected version did not match).
        """
        Repository._exactly_one(0 if row is None else row["found"], what)
        if row["id"] is None:
            raise ConflictError(
                f"{what} is at version {row['prior_version']}, not the expected {expected_version}"
            )
        return row

    async def _delete_one(
        self,
        sql: str,
        args: list[object],
        what: str,
        conn: asyncpg.Connection | None,
        *,
        tenant: str | None,
    ) -> bool:
        """Run a delete-by-id statement (``RETURNING`` the deleted rows); True if one went."""

        async def attempt() -> bool:
            async with self._transaction(conn, tenant=tenant) as active:
                rows = await active.fetch(sql, *args)
                if rows:
                    self._exactly_one(len(rows), what)
            return bool(rows)

        return await self._retrying(attempt, owns_transaction=conn is None)

    async def _retrying(
        self,
        attempt: Callable[[], Awaitable[T]],
        owns_transaction: bool,
        *,
        idempotent: bool = False,
        first_attempt: int = 1,
    ) -> T:
        """Run ``attempt``, retrying what a retry can fix (see :meth:`_should_retry`).

        ``first_attempt``: the number of this first attempt, when a caller
        made the ones before it.
        """
        assert 1 <= first_attempt <= MAX_ATTEMPTS
        for number in range(first_attempt, MAX_ATTEMPTS + 1):
            try:
                return await attempt()
            except (ConcurrencyError, StorageError) as exc:
                if not await self._should_retry(exc, number, owns_transaction, idempotent):
                    raise
        raise AssertionError("unreachable")

    @staticmethod
    async def _should_retry(
        exc: ConcurrencyError | StorageError, attempt: int, owns_transaction: bool, idempotent: bool
    ) -> bool:
        """Whether attempt number ``attempt``, failed with ``exc``, gets another (after a pause).

        Only where memsvc owns the transaction (inside a caller's transaction
        the whole transaction is doomed, so the error goes to the caller):

        - serialization failures and deadlocks, with capped, jittered backoff;
        - a pooled connection found broken before anything was sent (its
          backend was terminated while it sat idle in the pool);
        - for ``idempotent`` calls (reads), any broken connection.

        Lock timeouts are not retried: they already used the time budget.
        """
        if not owns_transaction or attempt >= MAX_ATTEMPTS:
            return False
        if isinstance(exc, ConcurrencyError):
            if getattr(exc.__cause__, "sqlstate", None) not in RETRY_SQLSTATES:
                return False
            await asyncio.sleep(min(0.5, 0.01 * 2**attempt) * random.random())
            return True
        unsent = isinstance(exc.__cause__, asyncpg.InternalClientError)
        # A statement prepared before a schema change (the switch of an
        # embedding-model migration) ran in a transaction, so the driver
        # could not re-prepare it: the whole attempt can.
        unsent = unsent or isinstance(exc.__cause__, asyncpg.InvalidCachedStatementError)
        # A timeout used the call's deadline up: it is reported, not retried.
        timed_out = isinstance(exc.__cause__, TimeoutError)
        broken = idempotent and connection_is_broken(exc) and not timed_out
        # The broken connection was closed; the next attempt gets another.
        return unsent or broken
