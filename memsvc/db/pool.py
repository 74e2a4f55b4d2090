"""The asyncpg connection pool memsvc runs on."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from memsvc.core.errors import SchemaError
from memsvc.core.settings import Settings
from memsvc.db.codecs import register_codecs
from memsvc.db.errors import translate_errors


def session_settings(settings: Settings) -> dict[str, str]:
    """Server settings sent when each connection starts.

    Sent in the startup packet, they are the connection's defaults, so they
    survive the ``RESET ALL`` asyncpg runs when a connection returns to the
    pool, and a search needs no extra round trip to set them. Behind
    pgbouncer (transaction pooling) they cannot be relied on; repositories then
    use ``SET LOCAL`` inside each search's transaction instead.
    """
    values = {"application_name": "memsvc"}
    if settings.pgbouncer:
        return values
    values.update(
        {
            "statement_timeout": str(settings.statement_timeout_ms),
            "lock_timeout": str(settings.lock_timeout_ms),
            "hnsw.ef_search": str(settings.hnsw_ef_search),
            "hnsw.iterative_scan": "relaxed_order",
            "hnsw.max_scan_tuples": str(settings.hnsw_max_scan_tuples),
        }
    )
    return values


class MemsvcConnection(asyncpg.Connection):  # type: ignore[misc]
    """An asyncpg connection that knows whether memsvc left it clean.

    asyncpg resets every connection returned to a pool with one more round
    trip (advisory unlock, CLOSE ALL, UNLISTEN, RESET ALL). memsvc's own
    statements leave no session state (it only uses SET LOCAL and
    transaction-scoped locks), so when a repository returns a connection it
    marks it clean and the reset is skipped: one round trip less per call.
    Connections an app acquires from ``svc.pool`` itself are reset in full.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._memsvc_clean = False
        # The idle-connection timer memsvc armed (see _watch_idle), and when
        # memsvc last returned the connection.
        self._memsvc_idle_timer: asyncio.TimerHandle | None = None
        self._memsvc_idle_since = 0.0

    def mark_clean(self) -> None:
        """memsvc used this connection and left no session state behind."""
        self._memsvc_clean = True


async def _reset_unless_clean(conn: asyncpg.Connection) -> None:
    # asyncpg has already rolled back any open transaction (Connection._reset).
    if getattr(conn, "_memsvc_clean", False):
        conn._memsvc_clean = False
        return
    query = conn.get_reset_query()
    if query:
        await conn.execute(query)


async def release(pool: asyncpg.Pool, conn: Any) -> None:
    """Return a connection to ``pool``; a clean one without an extra task.

    asyncpg's ``Pool.release`` runs the release inside ``asyncio.shield``, so
    that a caller cancelled half-way through a ROLLBACK or reset query cannot
    abandon the connection: a new task and three more event-loop turns per
    call, a measurable share of a short search. A connection memsvc marked
    clean, outside any transaction, with no cancellation, close or expiry
    pending, has nothing to wait for: asyncpg's release sends nothing and
    never suspends, so it cannot be interrupted either, and memsvc does its
    steps inline (see :func:`_release_clean`). Every other connection takes
    ``Pool.release``.
    """
    if _releases_inline(pool, conn):
        _release_clean(conn)
        return
    # asyncpg's release arms its own timer, and refuses to if one is armed.
    _cancel_idle_timer(conn)
    await pool.release(conn)


def _release_clean(proxy: Any) -> None:
    """What ``Pool.release`` does for a connection ``_releases_inline`` accepted.

    Step by step as asyncpg does them, without the coroutines around them:
    the release hook, ``Connection._reset`` (only the listeners to drop, as
    no transaction is open), memsvc's reset (nothing to send), then the
    holder back in the queue, its idle time counted from now (see
    :func:`_watch_idle`).
    """
    con = proxy._con
    holder = proxy._holder
    con._on_release()
    con._check_open()
    con._listeners.clear()
    con._log_listeners.clear()
    con._memsvc_clean = False
    holder._timeout = None
    holder._release()
    con._memsvc_idle_since = holder._pool._loop.time()
    if holder._inactive_callback is None:
        _watch_idle(holder, con, holder._max_inactive_time)


# asyncpg closes a pooled connection left idle for the pool's
# max_inactive_connection_lifetime (beyond its min_size) with a timer per
# holder, cancelled when the connection is taken and made again when it comes
# back: a timer made and one cancelled per call, a measurable share of a
# small search. The connections memsvc takes and returns itself keep one
# timer instead, which checks when it fires whether the connection has been
# idle long enough, and else waits again (see _on_idle_timer).


def _watch_idle(holder: Any, con: MemsvcConnection, delay: float) -> None:
    """Arm memsvc's idle timer on ``holder`` (nothing when the lifetime is 0: no limit)."""
    if holder._max_inactive_time:
        timer = holder._pool._loop.call_later(delay, _on_idle_timer, holder, con)
        holder._inactive_callback = con._memsvc_idle_timer = timer


def _on_idle_timer(holder: Any, con: MemsvcConnection) -> None:
    """Close the connection if idle for its lifetime (as asyncpg's timer would); else wait."""
    if holder._inactive_callback is not con._memsvc_idle_timer or holder._con is not con:
        return  # replaced since (asyncpg cancels what it replaces; this is a safeguard)
    holder._inactive_callback = con._memsvc_idle_timer = None
    lifetime = holder._max_inactive_time
    if holder._in_use is not None:
        _watch_idle(holder, con, lifetime)  # in use: not idle at all
        return
    idle = holder._pool._loop.time() - con._memsvc_idle_since
    if idle < lifetime:
        _watch_idle(holder, con, lifetime - idle)
        return
    # asyncpg's own: it keeps the pool's min_size of connections open.
    holder._deactivate_inactive_connection()


def _cancel_idle_timer(proxy: Any) -> None:
    """Cancel memsvc's idle timer on a connection's holder, if it has one armed."""
    try:
        holder = proxy._holder
        con = proxy._con
        if con is not None and holder._inactive_callback is con._memsvc_idle_timer:
            holder._maybe_cancel_inactive_callback()
            con._memsvc_idle_timer = None
    except AttributeError:
        return


def take_idle(pool: asyncpg.Pool) -> Any | None:
    """An idle connection checked out without suspending, or None to use ``pool.acquire()``.

    What ``pool.acquire()`` does when its queue's last holder is connected,
    current and the pool has no ``setup`` hook (memsvc sets none), without
    the five coroutine layers asyncpg wraps around it: a search's whole
    client work is a few of those. Anything else (no idle connection, an
    expired one, a closing pool, an asyncpg whose internals differ) answers
    None and takes the ordinary path. Return what it gives with
    :func:`release`, never ``pool.release`` directly: memsvc's idle timer
    stays armed on it, and asyncpg refuses to arm its own over another.
    """
    try:
        if pool._closing or pool._closed or not pool._initialized:
            return None
        queue = pool._queue
        if not queue._queue:
            return None
        # The last connected holder, as acquire would take it.
        holder = queue.get_nowait()
        con = holder._con
        if (
            con is None
            or con.is_closed()
            or holder._generation != pool._generation
            or holder._setup is not None
            or holder._in_use is not None
        ):
            queue.put_nowait(holder)  # where it was: acquire deals with it
            return None
        if holder._inactive_callback is not getattr(con, "_memsvc_idle_timer", None):
            # asyncpg's timer, which would refuse a connection in use: cancelled.
            # memsvc's stays armed (see _on_idle_timer).
            holder._maybe_cancel_inactive_callback()
        holder._proxy = proxy = PoolConnectionProxy(holder, con)
        holder._in_use = pool._loop.create_future()
        holder._timeout = None
        return proxy
    except AttributeError:
        return None


def unproxied(proxy: Any) -> Any:
    """The connection behind a pool's proxy, for statements run while memsvc holds it.

    The proxy checks on every call that it has not been released; memsvc
    releases a connection only after its statements end, so they may skip
    that layer. Anything but asyncpg's proxy is returned as it is.
    """
    if type(proxy) is PoolConnectionProxy:
        return proxy._con
    return proxy


def _releases_inline(pool: asyncpg.Pool, proxy: Any) -> bool:
    """Whether asyncpg's release of ``proxy`` completes without suspending (see release)."""
    try:
        con = proxy._con
        holder = proxy._holder
        return (
            type(proxy) is PoolConnectionProxy
            and holder._pool is pool
            and con is not None
            and con._memsvc_clean
            and holder._in_use is not None
            and not con.is_closed()
            # Connection._reset would send a ROLLBACK.
            and con._top_xact is None
            and not con.is_in_transaction()
            # Holder.release would wait for a cancellation, or close the connection.
            and not con._protocol._is_cancelling()
            and con._protocol.queries_count < holder._max_queries
            and holder._generation == pool._generation
            # The reset step: _reset_unless_clean returns at once for it.
            and pool._reset is _reset_unless_clean
        )
    except AttributeError:
        # An asyncpg whose internals differ: the ordinary path is always right.
        return False


async def find_vector_schema(conn: asyncpg.Connection) -> str:
    """The schema pgvector's types live in; SchemaError when it is not installed."""
    schema: str | None = await conn.fetchval(
        "SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'vector'"
    )
    if schema is None:
        raise SchemaError(
            "the pgvector extension is not installed in this database: install pgvector on the "
            "server (e.g. the pgvector/pgvector image or the postgresql-NN-pgvector package), "
            "then run `memsvc migrate`, which creates it"
        )
    return schema


async def create_pool(dsn: str, settings: Settings, vector_schema: str) -> asyncpg.Pool:
    """Open a pool whose connections carry memsvc's codecs and settings."""

    async def init(conn: asyncpg.Connection) -> None:
        await register_codecs(conn, vector_schema)

    options: dict[str, Any] = {
        "min_size": settings.pool_min_size,
        "max_size": settings.pool_max_size,
        "init": init,
        "connection_class": MemsvcConnection,
        "reset": _reset_unless_clean,
        "server_settings": session_settings(settings),
        "timeout": settings.connect_timeout_s,
        "command_timeout": settings.command_timeout_s,
    }
    if settings.pgbouncer:
        # pgbouncer in transaction mode cannot route named prepared statements.
        options["statement_cache_size"] = 0
    with translate_errors():
        pool: asyncpg.Pool = await asyncpg.create_pool(dsn, **options)
    return pool


async def connect(dsn: str, settings: Settings) -> asyncpg.Connection:
    """One plain connection (no codecs), for checks before the pool exists."""
    with translate_errors():
        conn: asyncpg.Connection = await asyncpg.connect(
            dsn,
            timeout=settings.connect_timeout_s,
            statement_cache_size=0 if settings.pgbouncer else 100,
        )
    return conn
