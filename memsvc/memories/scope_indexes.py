"""Scope indexes of memories: a partial HNSW index per big exact scope, and its life.

A search of one exact scope reads its rows through the btree scope index
and sorts them by distance (exact), or walks the table's HNSW graph,
stepping over every other scope's vectors. Past a few thousand vectors the
first costs a distance per row per search, and the second reads a graph
mostly of other scopes' vectors. An exact scope holding at least
``Settings.scope_index_from`` live vectors therefore gets an HNSW index of
its own: a partial index whose predicate names every level of the scope
(:func:`~memsvc.memories.scope_index_queries.create_index`). Searches of
exactly that scope add the scope's levels as literals to their statement
(:func:`~memsvc.memories.scope_index_queries.scope_literals`), from which
the planner proves the predicate and walks the scope's own small graph;
every other search keeps its statement.

A tenant or project *subtree* (the scope and everything under it) holding
that many vectors, some below its top level, and at most ``SUBTREE_SHARE``
of the table's, gets one too (at most :func:`subtree_cap` of them, built
after the exact scopes' indexes): its predicate names the subtree's levels,
and ``descendants`` searches of it add the same literals. (A subtree
holding most of the table gains little: a walk of the table's graph finds
its vectors on most steps.) Scope and subtree indexes share the cap, the
catalog (whose ``include`` says which an index is) and the life below.

Each index has a row in ``memory_scope_indexes`` (levels, index name,
state). Searches read the catalog at most every ``DIRECTORY_SECONDS``
(under row-level security, per tenant); an index built or dropped
meanwhile only changes which of two correct plans runs: the statement
without the index is the one searches ran before, and with the literals but
no index the planner reads the scope as it would.

The life of an index, every DDL under the schema's index DDL lock
(:mod:`memsvc.db.index_ddl`), built and dropped ``CONCURRENTLY`` (never in a
write's transaction, never blocking writers):

- built by :meth:`ScopeIndexes.maintain` (gc, and
  ``svc.maintenance.index_scopes()``), biggest scopes first, while fewer
  than ``Settings.scope_indexes_max`` exist; a build records its claim
  (``building``), builds, then marks it ``ready`` if its row is still there
  and the scope still holds a vector, or drops what it built;
- rebuilt when invalid (a build that stopped leaves an invalid index:
  PostgreSQL updates it on every write and never reads it);
- dropped when its scope holds fewer than half the threshold (emptied
  included): by ``delete_scope`` of the scope (or one above it) and by gc;
- dropped by erasure, with the scope's rows: every index of a scope within
  the erased one, found by the catalog and by reading index predicates back
  into values (never by matching text).

Not built on Citus or on a partitioned memories table (``CREATE INDEX
CONCURRENTLY`` refuses a partitioned table), nor behind pgbouncer (no session
lock can guard the DDL).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import time
from dataclasses import dataclass, field

import asyncpg

from memsvc.core.errors import MemsvcError
from memsvc.core.scope import Include, Scope
from memsvc.core.settings import Settings
from memsvc.db.index_ddl import (
    BULK_LOAD_RUNNING,
    BULK_LOCK_KEY,
    build_memory,
    build_memory_mb,
    drop_partial_index,
    index_ddl_session,
    run_ddl,
)
from memsvc.db.repository import Repository
from memsvc.db.sql import Params, scope_condition
from memsvc.db.table_columns import OPCLASSES
from memsvc.memories import scope_index_queries as q

log = logging.getLogger(__name__)

# How long a drop by erasure or delete_scope waits for other index DDL (a
# build of a large scope takes minutes); gc does not wait.
DDL_WAIT_SECONDS = 600.0
# Searches re-read which scopes have a ready index after this many seconds.
DIRECTORY_SECONDS = 10.0
TENANTS_KEPT = 4096
# A subtree holding more of the table's vectors than this gets no index.
SUBTREE_SHARE = 0.5


def subtree_cap(scope_indexes_max: int) -> int:
    """Subtree indexes at most: half the cap, so exact scopes always keep the other half.

    An agent's or a session's searches (exact scopes) are the most frequent;
    a subtree's index also costs writes into every scope under it. A
    subtree holding a small share of the table gains the most from its own
    graph (a walk of the table's finds its vectors on few of its steps), so
    the share must reach past the few largest subtrees.
    """
    return scope_indexes_max // 2

Levels = tuple[str, str | None, str | None, str | None]


@dataclass
class ScopeIndexReport:
    """What one :meth:`ScopeIndexes.maintain` did."""

    built: builtins.list[Scope] = field(default_factory=list)
    subtrees_built: builtins.list[Scope] = field(default_factory=list)  # descendants indexes
    dropped: int = 0  # emptied, shrunken or invalid (an invalid one may be built again)
    rebuilt: int = 0  # invalid ones built again
    full: int = 0  # big scopes left without an index: Settings.scope_indexes_max reached
    skipped: str | None = None  # why nothing was done, if so


@dataclass(frozen=True)
class ScopeIndex:
    """A scope index of memories, as the database has it."""

    name: str
    valid: bool
    scope: Scope | None  # the scope its predicate names; None: not one of memsvc's
    include: Include = "exact"  # "descendants": the scope's subtree


class ScopeIndexes(Repository):
    """The scope indexes of a schema's memories table (see the module docstring)."""

    def __init__(self, pool: asyncpg.Pool, settings: Settings) -> None:
        super().__init__(pool, settings)
        # Ready scopes (with what their index holds: "exact" or
        # "descendants") and the vectors last counted in each, by tenant
        # (None: every tenant's, read at once), with when they were read,
        # and the reads under way.
        self._directory: dict[str | None, tuple[float, dict[tuple[str, Levels], int | None]]] = {}
        self._reading: dict[str | None, asyncio.Task[None]] = {}

    # ------------------------------------------------------------------ searches

    def indexed(self, scope: Scope, include: Include = "exact") -> bool:
        """Whether ``scope`` (its subtree: ``descendants``) has a ready index, as of seconds ago.

        Never waits: a directory older than ``DIRECTORY_SECONDS`` (or none
        yet) is read again in the background, and meanwhile answers as it
        was (a search then runs the statement it ran before). So a search
        never needs a second connection (a caller's own connection may be
        the pool's last) nor a round trip more.
        """
        if self._settings.scope_indexes_max == 0:
            return False
        key = self._directory_key(scope.tenant)
        known = self._directory.get(key)
        if (known is None or time.monotonic() - known[0] > DIRECTORY_SECONDS) and (
            key not in self._reading
        ):
            task = asyncio.get_running_loop().create_task(self._read_in_background(key))
            self._reading[key] = task
            task.add_done_callback(lambda _: self._reading.pop(key, None))
        return known is not None and (include, scope.levels) in known[1]

    def vectors(self, scope: Scope, include: Include = "exact") -> int | None:
        """Vectors ``scope``'s ready index held when last counted (None: not counted, or none).

        As :meth:`indexed` knows it; counted when the index is built and by
        each gc since.
        """
        key = self._directory_key(scope.tenant)
        known = self._directory.get(key)
        return None if known is None else known[1].get((include, scope.levels))

    def _directory_key(self, tenant: str | None) -> str | None:
        # Under row-level security a tenant sees only its own catalog rows.
        return tenant if self._settings.row_level_security else None

    async def read_directory(self, tenant: str | None = None) -> None:
        """Read which scopes have a ready index now (``tenant``'s under row-level security)."""
        key = self._directory_key(tenant)
        if len(self._directory) >= TENANTS_KEPT:
            self._directory.clear()
        sql = q.every_row(self._schema) if key is None else q.of_tenant(self._schema)
        args = () if key is None else (key,)
        rows = await self._read(None, lambda conn: conn.fetch(sql, *args), tenant=key)
        ready = {
            (r["include"], (r["tenant_id"], r["project_id"], r["agent_id"], r["session_id"])): (
                r["vectors"]
            )
            for r in rows
            if r["state"] == "ready"
        }
        self._directory[key] = (time.monotonic(), ready)

    async def _read_in_background(self, key: str | None) -> None:
        try:
            await self.read_directory(key)
        except (MemsvcError, OSError) as exc:
            # Searches go on with what they knew; the next one tries again.
            log.debug("scope index directory not read: %s", exc)

    def forget_directory(self) -> None:
        """Read the catalog again at the next search (after this process changed it)."""
        self._directory.clear()

    async def stop_background_work(self) -> None:
        """Wait for directory reads under way (the service calls this before closing its pool)."""
        for task in list(self._reading.values()):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # ------------------------------------------------------------------ builds

    async def maintain(self) -> ScopeIndexReport:
        """Drop invalid and shrunken scope indexes; build those big scopes lack, up to the cap.

        Skipped under row-level security (gc sees no tenant's rows), on
        Citus or a partitioned table, behind pgbouncer, and when other index
        DDL holds the lock (the next run does it).
        """
        report = ScopeIndexReport()
        settings = self._settings
        if settings.row_level_security or settings.pgbouncer:
            report.skipped = "row_level_security" if settings.row_level_security else "pgbouncer"
            return report
        async with index_ddl_session(self._pool, settings, wait=0.0) as ddl:
            if ddl is None:
                report.skipped = "busy"
                return report
            if not await ddl.fetchval(q.buildable(self._schema)):
                report.skipped = "unsupported"
                return report
            if await ddl.fetchval(BULK_LOAD_RUNNING, BULK_LOCK_KEY):
                # The load dropped them and builds them after it: built now,
                # each would take the load's rows one by one.
                report.skipped = "bulk load"
                return report
            invalid = await self._collect(ddl, report)
            if settings.scope_indexes_max == 0:
                return report
            big = await self._big(ddl)
            await self._recount(ddl, big)
            present = {
                (index.scope, index.include)
                for index in await self._scope_indexes(ddl)
                if index.valid
            }
            subtree_room = subtree_cap(settings.scope_indexes_max) - sum(
                include == "descendants" for _, include in present
            )
            for row, include in big:
                scope = _scope_of(row)
                if (scope, include) in present:
                    continue
                if include == "descendants" and subtree_room <= 0:
                    report.full += 1
                    continue
                try:
                    outcome = await self._build(ddl, scope, include, int(row["vectors"]))
                except asyncpg.PostgresError as exc:
                    # E.g. a role that does not own the table: gc goes on,
                    # searches keep their plans; the owner's gc builds them.
                    log.warning("scope index of a memories scope not built: %s", exc)
                    report.skipped = f"build failed: {exc.sqlstate}"
                    break
                if outcome == "full":
                    report.full += 1
                elif outcome == "built" and include == "exact":
                    report.built.append(scope)
                elif outcome == "built":
                    report.subtrees_built.append(scope)
                    subtree_room -= 1
                report.rebuilt += outcome == "built" and (scope, include) in invalid
        # This process's searches see the change at once (others within seconds).
        await self.read_directory()
        return report

    async def _big(self, ddl: asyncpg.Connection) -> builtins.list[tuple[asyncpg.Record, Include]]:
        """Scopes worth an index, largest first, then subtrees (at most their share of the cap)."""
        settings = self._settings
        # Subtrees up to the cap: those past their share are reported as left out.
        rows = await ddl.fetch(
            q.worth_an_index(self._schema),
            settings.scope_index_from, settings.scope_indexes_max, SUBTREE_SHARE,
        )
        return [(row, "exact" if row["include"] == "exact" else "descendants") for row in rows]

    async def _recount(
        self, ddl: asyncpg.Connection, big: builtins.list[tuple[asyncpg.Record, Include]]
    ) -> None:
        """Record the vectors just counted in the scopes and subtrees whose index is listed."""
        names = [q.scope_index_name(_scope_of(row), include) for row, include in big]
        await ddl.execute(
            q.recount(self._schema),
            [row["tenant_id"] for row, _ in big],
            names,
            [row["vectors"] for row, _ in big],
        )

    async def _build(
        self, ddl: asyncpg.Connection, scope: Scope, include: Include, vectors: int
    ) -> str:
        """Build ``scope``'s index (its subtree's) on the locked session ``ddl``; the outcome.

        With memory for the graph of its ``vectors`` (a graph outgrowing
        ``maintenance_work_mem`` is built on disk, several times slower).

        ``"built"``, ``"ready"`` (it was there), ``"full"`` (the cap is
        reached) or ``"dropped"`` (emptied or erased while it was built).
        """
        name = q.scope_index_name(scope, include)
        async with ddl.transaction():
            await self._set_tenant(ddl, scope.tenant)
            row = await ddl.fetchrow(
                q.claim(self._schema), *scope.levels, name, self._settings.scope_indexes_max,
                include, vectors,
            )
        if row["outcome"] != "build":
            return str(row["outcome"])
        try:
            if row["leftover"]:
                await run_ddl(ddl, drop_partial_index(self._schema, name))
            await ddl.execute(build_memory(build_memory_mb(vectors, self._settings)))
            await run_ddl(ddl, self._create_sql(scope, include))
        except asyncpg.PostgresError:
            # No invalid index, no claim left behind (a cancelled build
            # leaves both to the next run of gc).
            await self._drop(ddl, scope.tenant, name)
            raise
        params = Params()
        scope_sql = scope_condition(scope, include, params)
        name_param = params.add(name)
        async with ddl.transaction():
            await self._set_tenant(ddl, scope.tenant)
            standing = await ddl.fetchval(
                q.mark_ready(self._schema, scope_sql, name_param), *params.values
            )
        if not standing:
            await self._drop(ddl, scope.tenant, name)
            return "dropped"
        return "built"

    def _create_sql(self, scope: Scope, include: Include) -> str:
        settings = self._settings
        return q.create_index(
            self._schema,
            scope,
            "embedding",
            OPCLASSES[(settings.vector_type, settings.distance)],
            settings.hnsw_m,
            settings.hnsw_ef_construction,
            include,
        )

    async def _collect(
        self, ddl: asyncpg.Connection, report: ScopeIndexReport
    ) -> set[tuple[Scope, Include]]:
        """Drop invalid and shrunken indexes, record unlisted ones; the scopes of invalid ones."""
        listed = {
            (row["tenant_id"], row["index_name"]): row
            for row in await ddl.fetch(q.every_row(self._schema))
        }
        invalid: set[tuple[Scope, Include]] = set()
        for index in await self._scope_indexes(ddl):
            if index.scope is None:
                continue
            scope = index.scope
            row = listed.pop((scope.tenant, index.name), None)
            if not index.valid or not await self._holds_enough(ddl, scope, index.include):
                await self._drop(ddl, scope.tenant, index.name)
                report.dropped += 1
                if not index.valid:
                    invalid.add((scope, index.include))
            elif row is None or row["state"] != "ready":
                await ddl.execute(
                    q.record(self._schema), *scope.levels, index.name, index.include
                )
        for tenant, name in listed:  # rows whose index is gone
            await ddl.execute(q.forget(self._schema), tenant, name)
        return invalid

    async def _holds_enough(
        self, conn: asyncpg.Connection, scope: Scope, include: Include
    ) -> bool:
        """Whether ``scope`` (its subtree) still holds half the threshold of vectors."""
        least = max(1, self._settings.scope_index_from // 2)
        params = Params()
        scope_sql = scope_condition(scope, include, params)
        held = await conn.fetchval(q.vectors_in(self._schema, scope_sql, least), *params.values)
        return bool(held >= least)

    # ------------------------------------------------------------------ drops

    async def drop_all(self) -> int:
        """Drop every scope and subtree index, before a bulk load; how many.

        A load that drops the table's graph drops these too (each loaded row
        would go into its scope's graphs one by one); :meth:`maintain` builds
        them again after it. Drops none (0) where they are not maintained
        (row-level security, pgbouncer), or while other index DDL holds the
        lock past ``DDL_WAIT_SECONDS``.
        """
        if self._settings.row_level_security or self._settings.pgbouncer:
            return 0
        async with index_ddl_session(self._pool, self._settings, wait=DDL_WAIT_SECONDS) as ddl:
            if ddl is None:
                return 0
            present = [
                (index.scope.tenant, index.name)
                for index in await self._scope_indexes(ddl)
                if index.scope is not None
            ]
            for tenant, name in present:
                await self._drop(ddl, tenant, name)
        self.forget_directory()
        return len(present)

    async def drop_shrunken(self, scope: Scope, include: Include) -> int:
        """After ``delete_scope``: drop indexes of scopes within it now holding too few vectors."""
        rows = await self._listed_within(scope, include)
        if not rows:
            return 0
        dropped = 0
        async with index_ddl_session(self._pool, self._settings, wait=DDL_WAIT_SECONDS) as ddl:
            if ddl is None:
                return 0  # gc drops them
            for row in rows:
                indexed = _scope_of(row)
                async with ddl.transaction():
                    await self._set_tenant(ddl, indexed.tenant)
                    enough = await self._holds_enough(ddl, indexed, row["include"])
                if not enough:
                    await self._drop(ddl, indexed.tenant, row["index_name"])
                    dropped += 1
        if dropped:
            self.forget_directory()
        return dropped

    async def drop_within(self, scope: Scope, include: Include) -> int:
        """Erasure: drop every index of a scope within ``scope`` (after its rows went); how many.

        Found by the catalog and by the predicates of the indexes present.
        Waits for index DDL in progress anywhere (a build of one of these
        scopes may be landing); if it waits in vain, nothing is dropped and
        :meth:`within` still finds them.
        """
        if not await self.within(scope, include):
            # None, and none can land later: a build claims its row before
            # it builds, and marks it ready only if the scope still holds a
            # vector (the erased rows are gone), else drops what it built.
            return 0
        names = {row["index_name"] for row in await self._listed_within(scope, include)}
        async with index_ddl_session(self._pool, self._settings, wait=DDL_WAIT_SECONDS) as ddl:
            if ddl is None:
                return 0
            names |= {
                index.name
                for index in await self._scope_indexes(ddl)
                if index.scope is not None and _within(index.scope, scope, include)
            }
            for name in sorted(names):
                await self._drop(ddl, scope.tenant, name)
        self.forget_directory()
        return len(names)

    async def within(self, scope: Scope, include: Include) -> builtins.list[str]:
        """Names of the indexes of scopes within ``scope`` (present, or listed by the catalog)."""
        listed = {row["index_name"] for row in await self._listed_within(scope, include)}
        async with self._transaction(tenant=scope.tenant, writes=False) as conn:
            present = await self._scope_indexes(conn)
        return sorted(
            {
                index.name
                for index in present
                if index.scope and _within(index.scope, scope, include)
            }
            | listed
        )

    async def _listed_within(self, scope: Scope, include: Include) -> builtins.list[asyncpg.Record]:
        """The catalog's rows of scopes within ``scope`` (the tenant's rows, filtered here)."""
        async with self._transaction(tenant=scope.tenant, writes=False) as conn:
            rows = await conn.fetch(q.of_tenant(self._schema), scope.tenant)
        return [row for row in rows if _within(_scope_of(row), scope, include)]

    async def _drop(self, ddl: asyncpg.Connection, tenant: str, name: str) -> None:
        await run_ddl(ddl, drop_partial_index(self._schema, name))
        async with ddl.transaction():
            await self._set_tenant(ddl, tenant)
            await ddl.execute(q.forget(self._schema), tenant, name)

    async def _scope_indexes(self, conn: asyncpg.Connection) -> builtins.list[ScopeIndex]:
        indexes = []
        for row in await conn.fetch(q.scope_indexes(self._schema)):
            read = q.read_predicate(row["predicate"], row["conforming"])
            if read is None:
                indexes.append(ScopeIndex(row["name"], row["valid"], None))
            else:
                indexes.append(ScopeIndex(row["name"], row["valid"], *read))
        return indexes


def _scope_of(row: asyncpg.Record) -> Scope:
    return Scope.trusted(row["tenant_id"], row["project_id"], row["agent_id"], row["session_id"])


def _within(indexed: Scope, scope: Scope, include: Include) -> bool:
    """Whether ``indexed`` is ``scope`` (exact), or in it or under it (descendants).

    As :func:`memsvc.db.sql.scope_condition` reads ``descendants``: every
    level down to the scope's deepest set one is equal (unset: NULL).
    """
    if include == "exact":
        return indexed == scope
    depth = scope.depth + 1
    return indexed.levels[:depth] == scope.levels[:depth]
