"""One partial index DDL at a time per schema: a polled session advisory lock.

``CREATE INDEX CONCURRENTLY`` waits for every transaction older than its
snapshot; a second build, or a ``DROP INDEX CONCURRENTLY``, waits for the
first's table lock inside a statement (with a snapshot), and PostgreSQL
ends one of the two as a deadlock. Two builds of partial indexes on
different tables also wait for each other's transactions. So every build
and drop of the partial indexes memsvc makes (the LangGraph store's
namespace indexes, memories' scope indexes) holds one session advisory
lock of the schema, taken by polling ``pg_try_advisory_lock`` (a statement
waiting for it would hold a snapshot a running build waits for).

Behind pgbouncer in transaction mode a session lock cannot be held across
statements: the session is yielded without it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg

from memsvc.core.settings import MAX_TIMEOUT_S, Settings
from memsvc.db.errors import translate_errors

POLL_FIRST_SECONDS = 0.05
POLL_MAX_SECONDS = 1.0
TRY_LOCK = "SELECT pg_try_advisory_lock(hashtextextended($1, 0))"
UNLOCK = "SELECT pg_advisory_unlock(hashtextextended($1, 0))"
# A build or a drop waits for older transactions: minutes, never cut short,
# by the server's timeouts or by the pool's client-side command timeout (a
# build over a few hundred thousand vectors takes minutes).
NO_TIMEOUTS = "SET statement_timeout = 0; SET lock_timeout = 0"
DDL_TIMEOUT_S = MAX_TIMEOUT_S


# Session advisory lock a bulk load holds while the memories' vector indexes
# are dropped (memsvc.transfer.bulk): one rebuild at a time, and gc builds no
# scope index meanwhile (every loaded row would go into its graph one by one).
BULK_LOCK_KEY = 0x6D656D737663_0B  # "memsvc" + 0x0b
# Whether another session holds the bulk-load lock ($1): taken and let go at once.
BULK_LOAD_RUNNING = (
    "SELECT CASE WHEN pg_try_advisory_lock($1) THEN NOT pg_advisory_unlock($1) ELSE true END"
)

MIN_BUILD_MEMORY_MB = 64
MAX_BUILD_MEMORY_MB = 1024


def build_memory_mb(rows: int, settings: Settings) -> int:
    """``maintenance_work_mem`` (MB) for building the HNSW graph of ``rows`` in memory.

    Per element: the vector, the neighbour lists of layer 0 (2m) and the
    upper layers, and bookkeeping; with a third of headroom. (A graph
    outgrowing ``maintenance_work_mem`` is built on disk, several times slower.)
    """
    vector_bytes = settings.embedding_dim * (2 if settings.vector_type == "halfvec" else 4)
    per_row = vector_bytes + settings.hnsw_m * 2 * 10 + 160
    wanted = int(rows * per_row * 4 / 3 / 2**20) + 1
    return max(MIN_BUILD_MEMORY_MB, min(MAX_BUILD_MEMORY_MB, wanted))


def build_memory(maintenance_work_mem_mb: int) -> str:
    """The session setting giving a build that much memory."""
    return f"SET maintenance_work_mem = '{int(maintenance_work_mem_mb)}MB'"


def lock_key(schema: str) -> str:
    """The text whose hash keys the schema's partial index DDL lock.

    Named after the first catalog that used it (the LangGraph store's), and
    kept: processes of an older memsvc still take this key.
    """
    return f"memsvc:{schema}:langgraph_store_namespace_indexes"


@asynccontextmanager
async def index_ddl_session(
    pool: asyncpg.Pool, settings: Settings, *, wait: float
) -> AsyncIterator[asyncpg.Connection | None]:
    """A pooled session holding the schema's DDL lock (None: not had within ``wait`` s).

    Its timeouts are lifted (a build or a drop waits for older
    transactions); the pool resets the session, and releases the lock
    should the block fail, when the connection goes back.
    """
    with translate_errors():
        async with pool.acquire() as conn:
            if settings.pgbouncer:
                yield conn
                return
            await conn.execute(NO_TIMEOUTS)
            key = lock_key(settings.db_schema)
            deadline = time.monotonic() + wait
            pause = POLL_FIRST_SECONDS
            while not await conn.fetchval(TRY_LOCK, key):
                if time.monotonic() + pause > deadline:
                    yield None
                    return
                await asyncio.sleep(pause)
                pause = min(pause * 2, POLL_MAX_SECONDS)
            yield conn
            await conn.execute(UNLOCK, key)


async def run_ddl(ddl: asyncpg.Connection, sql: str) -> None:
    """Run a build or drop on the DDL session, for as long as it takes."""
    await ddl.execute(sql, timeout=DDL_TIMEOUT_S)


def create_partial_hnsw(
    name: str, table: str, expression: str, opclass: str, m: int, ef_construction: int, where: str
) -> str:
    """A partial HNSW index of the rows ``where`` holds, built without blocking writers."""
    return (
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {table} "
        f"USING hnsw ({expression} {opclass}) "
        f"WITH (m = {int(m)}, ef_construction = {int(ef_construction)}) "
        f"WHERE {where}"
    )


def drop_partial_index(schema: str, name: str) -> str:
    """Drop a partial index (valid, or left invalid by a build that stopped) without blocking."""
    return f"DROP INDEX CONCURRENTLY IF EXISTS {schema}.{name}"
