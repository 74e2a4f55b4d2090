"""The asyncpg connection pool memsvc runs on."""

from __future__ import annotations

from typing import Any

import asyncpg

from memsvc.db.codecs import register_codecs
from memsvc.db.errors import translate_errors
from memsvc.errors import SchemaError
from memsvc.settings import Settings


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
        "server_settings": session_settings(settings),
        "timeout": settings.connect_timeout_s,
        "command_timeout": None,
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
