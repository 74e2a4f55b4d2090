"""Namespace indexes of LangGraph stores: built, found and dropped by what they hold.

A big namespace of a store gets a partial HNSW index of its own (see
:mod:`memsvc.langgraph_db.store` for when); its predicate names
the tenant and the namespace. Each one has a row in
``langgraph_store_namespace_indexes`` (tenant, namespace, index name,
state), so the store, erasure and gc find a tenant's or a namespace's index
by those values. An index without a row (built before the catalog, or
whose row erasure already removed) is found by reading its predicate back
into values (:func:`~memsvc.langgraph_db.store_index_queries.read_predicate`),
never by matching text.

One DDL at a time per schema. ``CREATE INDEX CONCURRENTLY`` waits for every
transaction older than its snapshot; a second build, or a ``DROP INDEX
CONCURRENTLY``, on the same table waits for the first's table lock inside a
statement (with a snapshot), and PostgreSQL ends one of the two as a
deadlock. So every build and drop holds a session
advisory lock of the schema, taken by polling ``pg_try_advisory_lock`` (a
statement waiting for it would hold a snapshot a running build waits for).

The life of an index:

- a build takes the lock, checks that the namespace still holds enough
  vectors, records its claim (``building``), builds, then marks it
  ``ready`` if its row is still there and the namespace still holds a
  vector; otherwise it drops what it built;
- erasure deletes the tenant's rows, then its catalog rows, then takes the
  lock (waiting for a build in progress anywhere to end) and drops every
  index listed or whose predicate names the tenant: no build can land
  after it, since a build that starts later finds no vectors;
- a delete that empties an indexed namespace, and gc, drop its index; gc
  also drops invalid ones (a build that stopped) and records indexes the
  catalog lacks.

Behind pgbouncer in transaction mode a session lock cannot be held across
statements: stores build no namespace index there, and drops run unlocked.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

import asyncpg

from memsvc.db.index_ddl import drop_partial_index, index_ddl_session, run_ddl
from memsvc.db.repository import Repository
from memsvc.langgraph_db import store_index_queries as q

# How long a build or an erasure waits for another process's namespace index
# DDL (a build of a large namespace takes minutes); gc does not wait.
DDL_WAIT_SECONDS = 600.0


@dataclass(frozen=True)
class NamespaceIndex:
    """A namespace index of the vectors table, as the database has it."""

    name: str
    valid: bool
    owner: tuple[str, str] | None  # (tenant, namespace) its predicate names; None: not memsvc's


class NamespaceIndexes(Repository):
    """The namespace indexes of a schema's LangGraph store tables (see the module docstring)."""

    async def build(
        self, tenant: str, prefix: str, create_sql: str, *, minimum: int, most: int
    ) -> str:
        """Build ``prefix``'s own index with ``create_sql`` unless it no longer should be.

        Returns ``"built"``, ``"ready"`` (it was there), ``"small"`` (fewer
        than ``minimum`` vectors now), ``"full"`` (``most`` namespace indexes
        exist), ``"busy"`` (other DDL held the lock too long) or
        ``"dropped"`` (emptied or erased while it was built).
        """
        name = q.namespace_index_name(tenant, prefix)
        async with self._ddl(wait=DDL_WAIT_SECONDS) as ddl:
            if ddl is None:
                return "busy"
            async with ddl.transaction():
                await self._set_tenant(ddl, tenant)
                row = await ddl.fetchrow(q.claim(self._schema, minimum), tenant, prefix, name, most)
            if row["outcome"] != "build":
                return str(row["outcome"])
            try:
                if row["leftover"]:
                    await run_ddl(ddl, drop_partial_index(self._schema, name))
                await run_ddl(ddl, create_sql)
            except asyncpg.PostgresError:
                # No invalid index, no claim left behind (a cancelled build
                # leaves both to the next build or to gc).
                await self._drop(ddl, tenant, prefix, name)
                raise
            async with ddl.transaction():
                await self._set_tenant(ddl, tenant)
                standing = await ddl.fetchval(q.mark_ready(self._schema), tenant, prefix, name)
            if not standing:
                await self._drop(ddl, tenant, prefix, name)
                return "dropped"
        return "built"

    async def emptied(
        self, tenant: str, prefixes: Sequence[str], conn: asyncpg.Connection
    ) -> builtins.list[str]:
        """Which indexed namespaces among ``prefixes`` hold no vector, on ``conn``'s transaction."""
        rows = await conn.fetch(q.emptied(self._schema), tenant, list(prefixes))
        return [row["prefix"] for row in rows]

    async def drop_emptied(self, tenant: str, prefixes: Sequence[str]) -> int:
        """Drop the indexes of these namespaces of ``tenant`` that still hold no vector."""
        dropped = 0
        async with self._ddl(wait=DDL_WAIT_SECONDS) as ddl:
            if ddl is None:
                return 0  # gc drops them
            for prefix in prefixes:
                async with ddl.transaction():
                    await self._set_tenant(ddl, tenant)
                    holds = await ddl.fetchval(q.holds_vectors(self._schema), tenant, prefix)
                if not holds:
                    await self._drop(ddl, tenant, prefix, q.namespace_index_name(tenant, prefix))
                    dropped += 1
        return dropped

    async def drop_tenant(self, tenant: str) -> int:
        """Drop every namespace index of ``tenant`` (after its rows were deleted); how many.

        Waits for namespace index DDL in progress anywhere (a build of this
        tenant's may be landing). If it waits in vain, nothing is dropped:
        :meth:`of_tenant` then still finds them.
        """
        async with self._transaction(tenant=tenant) as conn:
            rows = await conn.fetch(q.forget_tenant(self._schema), tenant)
        names = {row["index_name"] for row in rows}
        async with self._ddl(wait=DDL_WAIT_SECONDS) as ddl:
            if ddl is None:
                return 0
            names |= {
                index.name
                for index in await self._namespace_indexes(ddl)
                if index.owner is not None and index.owner[0] == tenant
            }
            for name in sorted(names):
                await run_ddl(ddl, drop_partial_index(self._schema, name))
        return len(names)

    async def of_tenant(self, tenant: str) -> builtins.list[str]:
        """Names of the namespace indexes that hold ``tenant``'s vectors (or that it lists)."""
        async with self._transaction(tenant=tenant, writes=False) as conn:
            rows = await conn.fetch(q.catalog_of_tenant(self._schema), tenant)
            listed = {row["index_name"] for row in rows}
            present = await self._namespace_indexes(conn)
        return sorted(
            index.name
            for index in present
            if index.name in listed or (index.owner is not None and index.owner[0] == tenant)
        )

    async def analyze(self) -> bool:
        """Gather the store tables' statistics now, unless other index DDL holds the lock.

        Under the lock: ``ANALYZE`` waits for a ``CREATE INDEX
        CONCURRENTLY``'s table lock with a snapshot the build waits for.
        Returns whether it ran (a role that does not own the tables gets a
        warning from PostgreSQL, no error).
        """
        async with self._ddl(wait=0.0) as ddl:
            if ddl is None:
                return False
            await ddl.execute(q.analyze_tables(self._schema))
        return True

    async def collect(self) -> int:
        """gc: drop indexes of emptied namespaces and invalid ones, record unlisted ones.

        Skipped (0) under row-level security, where gc sees no tenant's rows,
        and when other namespace index DDL holds the lock (the next run does it).
        """
        if self._settings.row_level_security:
            return 0
        dropped = 0
        async with self._ddl(wait=0.0) as ddl:
            if ddl is None:
                return 0
            claims = {
                (row["tenant_id"], row["prefix"]): row
                for row in await ddl.fetch(q.every_claim(self._schema))
            }
            for index in await self._namespace_indexes(ddl):
                if index.owner is None:
                    continue
                tenant, prefix = index.owner
                claim = claims.pop(index.owner, None)
                holds = await ddl.fetchval(q.holds_vectors(self._schema), tenant, prefix)
                if not index.valid or not holds:
                    await self._drop(ddl, tenant, prefix, index.name)
                    dropped += 1
                elif claim is None or claim["state"] != "ready":
                    await ddl.execute(q.record(self._schema), tenant, prefix, index.name)
            for tenant, prefix in claims:  # rows whose index is gone
                await ddl.execute(q.forget(self._schema), tenant, prefix)
        return dropped

    # ------------------------------------------------------------------ helpers

    async def _drop(self, ddl: asyncpg.Connection, tenant: str, prefix: str, name: str) -> None:
        await run_ddl(ddl, drop_partial_index(self._schema, name))
        async with ddl.transaction():
            await self._set_tenant(ddl, tenant)
            await ddl.execute(q.forget(self._schema), tenant, prefix)

    async def _namespace_indexes(self, conn: asyncpg.Connection) -> builtins.list[NamespaceIndex]:
        rows = await conn.fetch(q.namespace_indexes(self._schema))
        return [
            NamespaceIndex(
                row["name"], row["valid"], q.read_predicate(row["predicate"], row["conforming"])
            )
            for row in rows
        ]

    def _ddl(self, *, wait: float) -> AbstractAsyncContextManager[asyncpg.Connection | None]:
        """A pooled session holding the schema's index DDL lock (see :mod:`memsvc.db.index_ddl`)."""
        return index_ddl_session(self._pool, self._settings, wait=wait)
