"""Bulk loads without paying for HNSW on every row: drop the index, load, build it again.

Keeping an HNSW index exact on every insert limits a load to a few hundred
rows per second with 384-d vectors; building the index once over the loaded
table is several times faster. :class:`VectorIndexRebuild` does that safely:

- the index is dropped with ``DROP INDEX CONCURRENTLY`` (no lock that blocks
  readers or writers; prepared plans using it are re-planned), and rebuilt
  with ``CREATE INDEX CONCURRENTLY`` from its own ``pg_get_indexdef`` (the
  migration's definition, byte for byte; from the schema metadata if it was
  already missing), with enough ``maintenance_work_mem`` for the graph. The
  build runs in parallel (pgvector uses ``max_parallel_maintenance_workers``
  workers, and the leader builds too); on a server on this machine the
  workers are capped at one fewer than the CPUs, as more processes than
  CPUs only contend for the graph's locks;
- while it is missing, searches still return correct results: the planner
  falls back to exact scans (slower, never wrong), and concurrent writers
  keep writing (the concurrent build includes their rows);
- the rebuild runs whatever happened to the load (errors, cancellation), and
  ``indisvalid`` is checked before returning; a failed concurrent build,
  which leaves an invalid index behind, is dropped and built once more;
- a session advisory lock keeps two bulk loads from rebuilding at once (the
  second one loads with the index in place) and tells ``memsvc doctor
  --repair`` to leave a missing index to the load. If the process dies
  mid-load, ``memsvc doctor --repair`` builds the index again;
- the scope and subtree indexes (:mod:`memsvc.memories.scope_indexes`) are
  dropped with it, when the caller hands them over: they would take every
  loaded row of their scopes one by one. gc builds none while the lock is
  held; they are built again after the table's (as gc would, biggest
  first), and if the process dies mid-load, by the next gc.

Callers only use it when the load will insert many rows and the table is
empty or small next to them (see :func:`should_rebuild`; rows already stored
do not count, see :func:`count_new_memories`): rebuilding costs time in the
whole table, and searches run exact scans until it is done.
"""

from __future__ import annotations

import logging
import os
import re
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import asyncpg
from sqlalchemy.dialects import postgresql
from sqlalchemy.schema import CreateIndex

from memsvc.core.errors import MemsvcError, SchemaError, StorageError
from memsvc.core.settings import Settings
from memsvc.db.errors import translate_errors
from memsvc.db.index_ddl import build_memory_mb
from memsvc.db.pool import connect
from memsvc.db.tables import build_metadata
from memsvc.memories.scope_indexes import ScopeIndexes, ScopeIndexReport
from memsvc.progress import NO_PROGRESS, ProgressReporter
from memsvc.transfer import bulk_queries as q
from memsvc.transfer.loader import LoadReport

log = logging.getLogger(__name__)

MEMORY_VECTOR_INDEX = "ix_memories_embedding_hnsw"
ASSEMBLY_VECTOR_INDEX = "ix_assemblies_centroid_hnsw"

# Rebuild only for loads at least this large, into tables at most as large as the load.
BULK_MIN_ROWS = 10_000

_CREATE_INDEX = re.compile(r"^\s*CREATE\s+(UNIQUE\s+)?INDEX\s+", re.IGNORECASE)


# CREATE [UNIQUE] INDEX name ON [ONLY] table USING ..., as pg_get_indexdef and
# the schema metadata write it.
_INDEX_DEFINITION = re.compile(
    r"^\s*CREATE\s+(?P<unique>UNIQUE\s+)?INDEX\s+(?:CONCURRENTLY\s+)?(?:IF\s+NOT\s+EXISTS\s+)?"
    r"(?P<name>\S+)\s+ON\s+(?:ONLY\s+)?(?P<table>\S+)\s+(?P<rest>USING\s.*)$",
    re.IGNORECASE | re.DOTALL,
)


@dataclass(frozen=True, slots=True)
class IndexState:
    """What ``pg_index`` says about an index."""

    valid: bool
    ready: bool
    definition: str
    partitioned: bool = False


def should_rebuild(incoming_rows: int, existing_rows: int) -> bool:
    """Whether dropping and rebuilding the vector index beats keeping it during a load.

    Building is several times faster per row than inserting into the index,
    but it covers the rows already there too, and searches run exact while
    it is missing: worth it for a large load into a table no larger than it.
    """
    return incoming_rows >= BULK_MIN_ROWS and existing_rows <= incoming_rows


def new_rows_needed(existing_rows: int) -> int:
    """The fewest new rows for which :func:`should_rebuild` says yes (counting can stop there)."""
    return max(BULK_MIN_ROWS, existing_rows)


# Ids checked against the table per round trip by count_new_memories.
NEW_ROWS_CHUNK = 5_000


async def count_new_memories(
    conn: asyncpg.Connection,
    schema: str,
    ids: Iterable[tuple[str, uuid.UUID]],
    *,
    enough: int,
) -> int:
    """How many of ``ids`` (tenant, memory id) are not stored yet; stops past ``enough``.

    Decides whether a load pays for an index rebuild by what it will really
    insert: re-importing rows already present inserts nothing. Memory held
    is one chunk of ids; the count stops once it reaches ``enough``.
    """
    sql = q.count_new(schema)
    new = 0
    tenants: list[str] = []
    memory_ids: list[uuid.UUID] = []

    async def check() -> int:
        with translate_errors():
            count: int = await conn.fetchval(sql, tenants, memory_ids)
        tenants.clear()
        memory_ids.clear()
        return count

    for tenant, memory_id in ids:
        tenants.append(tenant)
        memory_ids.append(memory_id)
        if len(memory_ids) >= NEW_ROWS_CHUNK:
            new += await check()
            if new >= enough:
                return new
    if memory_ids:
        new += await check()
    return new


def build_workers(server: Mapping[str, Any], cpus: int | None) -> int | None:
    """Parallel workers to ask for when building, or None to keep the server's setting.

    The leader process builds as well, so a build uses workers + 1 CPUs;
    beyond the CPUs there are, pgvector's processes only wait on each
    other. Only for a server on this machine (a Unix socket), whose CPUs we
    can count; never more workers than the server allows.
    """
    configured = int(server["workers"])
    if not server["local"] or cpus is None or configured <= cpus - 1:
        return None
    return max(0, cpus - 1)


def metadata_index_definition(settings: Settings, name: str) -> str:
    """The CREATE INDEX statement of an index as the schema metadata declares it."""
    for table in build_metadata(settings).tables.values():
        for index in table.indexes:
            if index.name == name:
                statement = CreateIndex(index).compile(dialect=postgresql.dialect())  # type: ignore[no-untyped-call]
                return str(statement)
    raise SchemaError(f"no index named {name} in memsvc's schema")


def concurrent_definition(definition: str) -> str:
    """Turn ``CREATE [UNIQUE] INDEX name ...`` into its CONCURRENTLY IF NOT EXISTS form."""
    match = _CREATE_INDEX.match(definition)
    if match is None:
        raise SchemaError(f"not a CREATE INDEX statement: {definition[:60]}")
    unique = "UNIQUE " if match.group(1) else ""
    return f"CREATE {unique}INDEX CONCURRENTLY IF NOT EXISTS " + definition[match.end() :]


async def index_state(conn: asyncpg.Connection, schema: str, name: str) -> IndexState | None:
    """The index's state, or None when it does not exist."""
    with translate_errors():
        row = await conn.fetchrow(q.index_state(), schema, name)
    if row is None:
        return None
    return IndexState(
        valid=row["valid"],
        ready=row["ready"],
        definition=row["definition"],
        partitioned=row["partitioned"],
    )


async def drop_index(conn: asyncpg.Connection, schema: str, name: str) -> None:
    """Drop an index without blocking its table's readers and writers where PostgreSQL can.

    A partitioned table's index cannot be dropped concurrently: it is dropped
    with a short exclusive lock instead (see :func:`q.drop_partitioned_index`).
    """
    state = await index_state(conn, schema, name)
    with translate_errors():
        if state is not None and state.partitioned:
            await conn.execute(q.drop_partitioned_index(schema, name))
        else:
            await conn.execute(q.drop_index_concurrently(schema, name))


def _parse_definition(definition: str) -> re.Match[str]:
    match = _INDEX_DEFINITION.match(definition)
    if match is None:
        raise SchemaError(f"not a CREATE INDEX statement: {definition[:80]}")
    return match


async def _build_one(conn: asyncpg.Connection, schema: str, name: str, definition: str) -> None:
    """Build one index concurrently; an invalid leftover is dropped first, a failure retried."""
    for attempt in (1, 2):
        state = await index_state(conn, schema, name)
        if state is not None and state.valid:
            return
        if state is not None:
            await conn.execute(q.drop_index_concurrently(schema, name))
        try:
            await conn.execute(concurrent_definition(definition))
        except asyncpg.PostgresError as exc:
            if attempt == 2:
                raise
            log.warning("building %s.%s failed (%s); retrying once", schema, name, exc)


async def _build_partitioned(
    conn: asyncpg.Connection, schema: str, definition: re.Match[str]
) -> None:
    """Build a partitioned table's index without blocking writes.

    ``CREATE INDEX CONCURRENTLY`` is refused on a partitioned table: each
    partition's index is built concurrently (each serves searches as soon as
    it is done), then the parent index is declared ``ON ONLY`` the parent
    (instant, invalid until complete) and each partition's index attached
    to it; with all attached the parent index is valid. Run again after a
    crash, it picks up where it stopped.
    """
    unique, name, table, rest = (definition.group(g) for g in ("unique", "name", "table", "rest"))
    unique = unique or ""
    for attempt in (1, 2):
        partitions = await conn.fetch(q.partitions_of(), table)
        children = [f"{name}_{row['relname'].rsplit('_', 1)[-1]}" for row in partitions]
        for row, child in zip(partitions, children, strict=True):
            await _build_one(
                conn, schema, child, f"CREATE {unique}INDEX {child} ON {row['name']} {rest}"
            )
        await conn.execute(f"CREATE {unique}INDEX IF NOT EXISTS {name} ON ONLY {table} {rest}")
        for child in children:
            await conn.execute(q.attach_index(schema, name, child))
        state = await index_state(conn, schema, name)
        if attempt == 1 and state is not None and not state.valid:
            # Every partition's index attached and the parent still invalid
            # (marked so by hand, or attached under other names): build anew.
            log.warning("%s.%s invalid with its partitions attached; rebuilding", schema, name)
            await conn.execute(q.drop_partitioned_index(schema, name))
            continue
        return


async def build_index(
    conn: asyncpg.Connection,
    settings: Settings,
    name: str,
    definition: str,
    *,
    rows: int,
    progress: ProgressReporter = NO_PROGRESS,
    description: str | None = None,
) -> None:
    """Build an index concurrently and make sure it ends up valid.

    ``conn`` must not be in a transaction. An invalid leftover (a concurrent
    build that failed) is dropped first; a build that fails is retried once.
    ``description`` is the progress step's text (default: which index, over
    how many rows).
    """
    schema = settings.db_schema
    with translate_errors():
        await conn.execute(q.build_settings(build_memory_mb(rows, settings)))
        workers = build_workers(await conn.fetchrow(q.BUILD_WORKERS), os.cpu_count())
        if workers is not None:
            await conn.execute(q.limit_build_workers(workers))
        progress.start(description or f"building index {name} over {rows:,} rows", total=None)
        parsed = _parse_definition(definition)
        if await conn.fetchval(q.is_partitioned(), parsed.group("table")):
            await _build_partitioned(conn, schema, parsed)
        else:
            await _build_one(conn, schema, name, definition)
    progress.done()
    state = await index_state(conn, schema, name)
    if state is None or not state.valid:
        raise StorageError(
            f"index {schema}.{name} is not valid after building it; run `memsvc doctor --repair`"
        )


class VectorIndexRebuild:
    """Drop the memories' HNSW index for the duration of a bulk load, then build it again.

    Use as ``async with VectorIndexRebuild(dsn, settings) as rebuild:`` around
    the load; ``rebuild.active`` says whether the index really was dropped
    (False when another bulk load holds the lock or the drop could not get
    its lock in time: the load then runs with the index in place, correct but
    slower). The build happens on exit, even when the load failed.
    """

    def __init__(
        self,
        dsn: str,
        settings: Settings,
        *,
        name: str = MEMORY_VECTOR_INDEX,
        progress: ProgressReporter = NO_PROGRESS,
        scope_indexes: ScopeIndexes | None = None,
    ) -> None:
        self._dsn = dsn
        self._progress = progress
        self._settings = settings
        self._name = name
        self._scope_indexes = scope_indexes
        self._conn: asyncpg.Connection | None = None
        self._definition = ""
        self.active = False
        self.build_seconds = 0.0
        # Scope indexes dropped for the load, and what building them after did.
        self.scope_indexes_dropped = 0
        self.scope_indexes_report: ScopeIndexReport | None = None

    async def __aenter__(self) -> VectorIndexRebuild:
        schema = self._settings.db_schema
        # A connection of our own: session settings and the session lock
        # must not leak into the pool, and CONCURRENTLY needs autocommit.
        self._conn = await connect(self._dsn, self._settings)
        try:
            with translate_errors():
                locked = await self._conn.fetchval(q.TRY_LOCK, q.BULK_LOCK_KEY)
            if not locked:
                log.info("another bulk load is rebuilding %s; keeping the index", self._name)
                return self
            state = await index_state(self._conn, schema, self._name)
            self._definition = (
                state.definition
                if state is not None
                else metadata_index_definition(self._settings, self._name)
            )
            await drop_index(self._conn, schema, self._name)
            self.active = True
        except MemsvcError as exc:
            log.warning("could not drop %s for a bulk load (%s); keeping it", self._name, exc)
            await self._release()
            return self
        if self._scope_indexes is not None:
            try:
                self.scope_indexes_dropped = await self._scope_indexes.drop_all()
            except MemsvcError as exc:
                log.warning("scope indexes kept for a bulk load: %s", exc)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._conn is None:
            return
        try:
            if self.active:
                started = time.perf_counter()
                with translate_errors():
                    rows = await self._conn.fetchval(
                        q.count_up_to(self._settings.db_schema, "memories"), 10_000_000
                    )
                await build_index(
                    self._conn,
                    self._settings,
                    self._name,
                    self._definition,
                    rows=rows,
                    progress=self._progress,
                )
                self.build_seconds = time.perf_counter() - started
        finally:
            await self._release()
        if self.scope_indexes_dropped and self._scope_indexes is not None:
            # After the lock is let go (maintain builds nothing while a load holds it).
            try:
                self.scope_indexes_report = await self._scope_indexes.maintain()
            except MemsvcError as exc:
                log.warning("scope indexes not built after a bulk load (gc builds them): %s", exc)

    def record(self, report: LoadReport) -> None:
        """Write what the rebuild did into the load's report."""
        report.index_build_seconds = self.build_seconds
        report.scope_indexes_dropped = self.scope_indexes_dropped
        built = self.scope_indexes_report
        if built is not None:
            report.scope_indexes_built = len(built.built) + len(built.subtrees_built)

    async def _release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            await conn.close()  # ends the session: its advisory lock goes with it
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.warning("closing the bulk-load connection failed: %s", exc)
