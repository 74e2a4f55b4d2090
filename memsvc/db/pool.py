"""The asyncpg connection pool memsvc runs on."""

from __future__ import annotations

from typing import Any

import asyncpg

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
    marks it clean and the pool's reset (asyncpg's public ``reset=`` hook)
    sends nothing. Connections an app acquires from ``svc.pool`` itself are
    reset in full.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.memsvc_clean = False

    def mark_clean(self) -> None:
        """memsvc used this connection and left no session state behind."""
        self.memsvc_clean = True


async def reset_unless_clean(conn: asyncpg.Connection) -> None:
    """The pool's reset: nothing for a connection memsvc marked clean, else asyncpg's."""
    # asyncpg has already rolled back any open transaction before the reset.
    if getattr(conn, "memsvc_clean", False):
        conn.memsvc_clean = False
        return
    query = conn.get_reset_query()
    if query:
        await conn.execute(query)


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
        "reset": reset_unless_clean,
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
