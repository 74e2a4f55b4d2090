"""Erasure that leaves nothing: ``svc.erase(scope)`` and ``memsvc erase``.

``delete`` and ``delete_scope`` keep each memory's content in its history
(audit). Erasure removes a scope's memories together with every event of
their history, memberships (surviving assemblies are recomputed), the
scope's assemblies and session checkpoints, LangGraph rows when the scope is
a whole tenant, and working memory; it leaves one content-free ``erased``
event per memory, so feeds and audits see that something was erased, and when.

It works in batches, each its own short transaction, in an order that makes
every batch complete on its own: a crash loses at most the batch in flight
(rolled back), and running it again finishes the work (idempotent). It then
checks with real queries that nothing of the scope remains (see
:class:`ErasureReceipt`).

Writers racing an erasure: what committed before it began is gone when it
returns (each batch reads the latest committed rows, and the passes run until
one finds nothing). A write committing while it runs is either erased whole
(row and history, as one batch) or kept whole (row with its full history);
``verified`` is False when such a write is still there at the end, and a
second run erases it.
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg

from memsvc.errors import ValidationError
from memsvc.ops import erasure_queries as q
from memsvc.progress import NO_PROGRESS, ProgressReporter
from memsvc.repositories.assemblies import AssemblyRepository
from memsvc.repositories.base import Repository
from memsvc.repositories.langgraph_checkpoints import LangGraphCheckpointRepository
from memsvc.repositories.langgraph_store_indexes import NamespaceIndexes
from memsvc.repositories.scope_sql import Params, scope_condition
from memsvc.repositories.tenancy import tenant_scoped
from memsvc.scope import Include, Scope, validate_include
from memsvc.settings import Settings
from memsvc.validation import validate_limit, validate_scope
from memsvc.working import WorkingStore

DEFAULT_BATCH = 500
MAX_BATCH = 10_000


@dataclass
class ErasureReceipt:
    """What an erasure removed, and whether a check afterwards found nothing left.

    Attributes:
        scope: The scope erased.
        include: ``"descendants"`` (the scope and everything under it) or ``"exact"``.
        removed: Rows removed per table (``memory_events`` counts the history
            removed; ``erased`` tombstones written are under ``tombstones``),
            plus ``working_sessions``: sessions dropped from working memory.
        started: When the erasure began (the database's clock).
        finished: When the verification ended (the database's clock).
        verified: True when the verification queries found no row of the
            scope in any memsvc table, no history of an erased memory but its
            tombstone, and none of the erased contents in any text or JSON
            column (except where a memory outside the scope still holds it).
        remaining: What the verification found, per table or column (empty
            when ``verified``).
        written_during: Rows of the scope created after the erasure began,
            per table: kept whole (with their full history); erase again to
            remove them.
        langgraph: Whether LangGraph checkpoints and store items were erased
            (only for a whole tenant: their rows carry no narrower scope).
            The store's namespace indexes go with them (counted under
            ``removed["namespace_indexes"]``); the verification reads index
            definitions too (``remaining["namespace_indexes"]``).
    """

    scope: Scope
    include: str
    removed: dict[str, int] = field(default_factory=dict)
    started: datetime = field(default_factory=lambda: datetime.now(UTC))
    finished: datetime | None = None
    verified: bool = False
    remaining: dict[str, int] = field(default_factory=dict)
    written_during: dict[str, int] = field(default_factory=dict)
    langgraph: bool = False

    def add(self, table: str, count: int) -> None:
        """Count ``count`` more rows removed from ``table``."""
        self.removed[table] = self.removed.get(table, 0) + int(count)


@tenant_scoped
class Erasure(Repository):
    """Runs erasures on the service's pool (``svc.erase``)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: Settings,
        *,
        assemblies: AssemblyRepository,
        working_store: WorkingStore,
    ) -> None:
        super().__init__(pool, settings)
        self._assemblies = assemblies
        self._working_store = working_store
        self._langgraph = LangGraphCheckpointRepository(pool, settings)
        self._store_indexes = NamespaceIndexes(pool, settings)

    async def erase(
        self,
        scope: Scope,
        *,
        include: Include = "descendants",
        batch_size: int = DEFAULT_BATCH,
        progress: ProgressReporter = NO_PROGRESS,
    ) -> ErasureReceipt:
        """Erase everything memsvc holds for ``scope``; see the module docstring.

        Args:
            scope: What to erase; with ``include="descendants"`` (default) also
                every scope under it, with ``"exact"`` only rows of exactly it.
            include: ``"descendants"`` or ``"exact"`` (``"ancestors"`` would
                erase other scopes' rows and is refused).
            batch_size: Rows (or LangGraph threads) per transaction.
            progress: Told each pass as a step and each batch's rows.
        """
        scope = validate_scope(scope)
        include = validate_include(include)
        if include == "ancestors":
            raise ValidationError("include", "must be 'descendants' or 'exact' for erase")
        batch_size = validate_limit(batch_size, "batch_size", MAX_BATCH)
        whole_tenant = include == "descendants" and scope.depth == 0
        started: datetime = await self._read(None, lambda conn: conn.fetchval(q.NOW))
        receipt = ErasureReceipt(
            scope=scope, include=include, started=started, langgraph=whole_tenant
        )
        erased = _Erased()

        progress.start("erasing assemblies")
        await self._erase_assemblies(scope, include, batch_size, receipt, progress)
        progress.start("erasing memories and their history")
        await self._erase_memories(scope, include, batch_size, receipt, erased, progress)
        progress.start("erasing the history of deleted memories")
        await self._erase_histories(scope, include, batch_size, receipt, erased, progress)
        progress.start("erasing session checkpoints")
        await self._erase_checkpoints(scope, include, batch_size, receipt, progress)
        if whole_tenant:
            progress.start("erasing LangGraph checkpoints and store items")
            await self._erase_langgraph(scope.tenant, batch_size, receipt)
        progress.start("erasing working memory", total=None, unit="sessions")
        sessions = await self._working_store.erase_sessions(
            scope, descendants=include == "descendants"
        )
        receipt.add("working_sessions", sessions)
        progress.start("verifying", total=None)
        await self._verify(scope, include, whole_tenant, erased, receipt)
        progress.done()
        return receipt

    # ------------------------------------------------------------------ passes

    async def _batches(
        self,
        run: Callable[[asyncpg.Connection], Awaitable[dict[str, int]]],
        receipt: ErasureReceipt,
        progress: ProgressReporter,
    ) -> None:
        """Call ``run(conn)``, each time in its own transaction, until it removes nothing.

        ``run`` returns the rows it removed per table; they are counted once
        its transaction committed (a retried attempt would count twice).
        """
        while True:

            async def attempt() -> dict[str, int]:
                async with self._transaction() as active:
                    return await run(active)

            counts = await self._retrying(attempt, owns_transaction=True)
            if not any(counts.values()):
                return
            for table, count in counts.items():
                receipt.add(table, count)
            progress.advance(sum(counts.values()))

    async def _erase_assemblies(
        self,
        scope: Scope,
        include: Include,
        batch_size: int,
        receipt: ErasureReceipt,
        progress: ProgressReporter,
    ) -> None:
        params = Params()
        scope_sql = scope_condition(scope, include, params)
        lock_sql = q.lock_assemblies_batch(
            self._schema, scope_sql, params.add(receipt.started), params.add(batch_size)
        )
        delete_sql = q.delete_assemblies(self._schema)

        async def run(conn: asyncpg.Connection) -> dict[str, int]:
            rows = await conn.fetch(lock_sql, *params.values)
            if not rows:
                return {}
            counts = await conn.fetchrow(
                delete_sql, [r["tenant_id"] for r in rows], [r["id"] for r in rows]
            )
            return {
                "assemblies": counts["assemblies"],
                "assembly_members": counts["members"],
                "entity_events": counts["entity_events"],
            }

        await self._batches(run, receipt, progress)

    async def _erase_memories(
        self,
        scope: Scope,
        include: Include,
        batch_size: int,
        receipt: ErasureReceipt,
        erased: _Erased,
        progress: ProgressReporter,
    ) -> None:
        params = Params()
        scope_sql = scope_condition(scope, include, params)
        lock_sql = q.lock_memories_batch(
            self._schema, scope_sql, params.add(receipt.started), params.add(batch_size)
        )
        erase_sql = q.erase_memories(self._schema)

        while True:

            async def attempt() -> _Batch | None:
                async with self._transaction() as active:
                    rows = await active.fetch(lock_sql, *params.values)
                    if not rows:
                        return None
                    tenants = [r["tenant_id"] for r in rows]
                    ids = [r["id"] for r in rows]
                    members = await self._assemblies.erase_memberships(active, tenants, ids)
                    counts = await active.fetchrow(erase_sql, tenants, ids)
                return _Batch(rows, members, counts)

            batch = await self._retrying(attempt, owns_transaction=True)
            if batch is None:
                return
            receipt.add("memories", batch.counts["memories"])
            receipt.add("memory_events", batch.counts["events"])
            receipt.add("tombstones", batch.counts["tombstones"])
            receipt.add("assembly_members", batch.members)
            erased.ids.extend((r["tenant_id"], r["id"]) for r in batch.rows)
            erased.hashes.update(r["content_hash"] for r in batch.rows)
            erased.lengths.update(r["content_bytes"] for r in batch.rows)
            progress.advance(len(batch.rows))

    async def _erase_histories(
        self,
        scope: Scope,
        include: Include,
        batch_size: int,
        receipt: ErasureReceipt,
        erased: _Erased,
        progress: ProgressReporter,
    ) -> None:
        params = Params()
        prior_sql = q.prior_scope_condition(scope, include, params)
        after = params.add(uuid.UUID(int=0))
        select_sql = q.deleted_memories_batch(
            self._schema, prior_sql, after, params.add(batch_size)
        )
        erase_sql = q.erase_histories(self._schema)
        while True:

            async def attempt() -> tuple[builtins.list[Any], Any] | None:
                async with self._transaction() as active:
                    rows = await active.fetch(select_sql, *params.values)
                    if not rows:
                        return None
                    tenants = [r["tenant_id"] for r in rows]
                    ids = [r["memory_id"] for r in rows]
                    keys = [f"{self._schema}:{t}:{i}" for t, i in zip(tenants, ids, strict=True)]
                    await active.execute(q.LOCK_HISTORIES, keys)
                    counts = await active.fetchrow(erase_sql, tenants, ids)
                return rows, counts

            done = await self._retrying(attempt, owns_transaction=True)
            if done is None:
                return
            rows, counts = done
            # The scope's tenant is fixed, so the id alone orders the keyset.
            params.values[int(after[1:]) - 1] = rows[-1]["memory_id"]
            receipt.add("memory_events", counts["events"])
            receipt.add("tombstones", counts["tombstones"])
            erased.ids.extend((r["tenant_id"], r["memory_id"]) for r in rows)
            erased.hashes.update(counts["hashes"])
            erased.lengths.update(counts["lengths"])
            progress.advance(len(rows))

    async def _erase_checkpoints(
        self,
        scope: Scope,
        include: Include,
        batch_size: int,
        receipt: ErasureReceipt,
        progress: ProgressReporter,
    ) -> None:
        params = Params()
        scope_sql = scope_condition(scope, include, params)
        sql = q.delete_checkpoints_batch(
            self._schema, scope_sql, params.add(receipt.started), params.add(batch_size)
        )

        async def run(conn: asyncpg.Connection) -> dict[str, int]:
            counts = await conn.fetchrow(sql, *params.values)
            return {
                "session_checkpoints": counts["checkpoints"],
                "entity_events": counts["entity_events"],
            }

        await self._batches(run, receipt, progress)

    async def _erase_langgraph(
        self, tenant: str, batch_size: int, receipt: ErasureReceipt
    ) -> None:
        threads = await self._langgraph.erase_tenant_threads(
            tenant=tenant, batch_size=max(1, batch_size // 10)
        )
        for table, count in threads.items():
            receipt.add(table, count)
        sql = q.delete_store_items_batch(self._schema)

        async def run(conn: asyncpg.Connection) -> dict[str, int]:
            counts = await conn.fetchrow(sql, tenant, batch_size)
            return {
                "langgraph_store_items": counts["items"],
                "langgraph_store_vectors": counts["vectors"],
            }

        await self._batches(run, receipt, NO_PROGRESS)
        # The store's namespace indexes name the tenant and its namespaces in
        # their predicates: they go with the rows (a build still running
        # anywhere is waited for; one starting later finds no rows).
        receipt.add("namespace_indexes", await self._store_indexes.drop_tenant(tenant))

    # ------------------------------------------------------------ verification

    async def _verify(
        self,
        scope: Scope,
        include: Include,
        whole_tenant: bool,
        erased: _Erased,
        receipt: ErasureReceipt,
    ) -> None:
        """Look for anything of the scope left; fills ``remaining`` and ``written_during``."""
        params = Params()
        scope_sql = scope_condition(scope, include, params)
        prior_sql = q.prior_scope_condition(scope, include, params)
        started = params.add(receipt.started)
        remaining_sql = q.remaining(
            self._schema,
            scope_sql=scope_sql,
            prior_scope_sql=prior_sql,
            tenant=params.add(scope.tenant) if whole_tenant else "",
            tenants=params.add([t for t, _ in erased.ids]),
            ids=params.add([i for _, i in erased.ids]),
            started=started,
            whole_tenant=whole_tenant,
        )
        during_params = Params()
        during_sql = q.written_during(
            self._schema,
            scope_condition(scope, include, during_params),
            during_params.add(receipt.started),
        )
        async with self._transaction() as conn:
            row = await conn.fetchrow(remaining_sql, *params.values)
            found = {name: count for name, count in row.items() if count}
            if erased.hashes:
                found.update(await self._content_left(conn, scope.tenant, erased))
            during = await conn.fetchrow(during_sql, *during_params.values)
            receipt.finished = await conn.fetchval(q.NOW)
        if whole_tenant:
            # Index definitions hold the tenant and namespace labels too.
            indexes = len(await self._store_indexes.of_tenant(scope.tenant))
            if indexes:
                found["namespace_indexes"] = indexes
        receipt.remaining = found
        receipt.written_during = {name: count for name, count in during.items() if count}
        receipt.verified = not found

    async def _content_left(
        self, conn: asyncpg.Connection, tenant: str, erased: _Erased
    ) -> dict[str, int]:
        """Text and JSON values, in every table of the schema, equal to an erased content.

        Contents a live memory still holds (necessarily outside the erased
        scope, which has none left) are not looked for: they must survive.
        The columns are read from the catalog, so new tables are covered.
        """
        rows = await conn.fetch(q.held_elsewhere(self._schema), sorted(erased.hashes), tenant)
        held = {row["content_hash"] for row in rows}
        wanted = sorted(erased.hashes - held)
        if not wanted:
            return {}
        tables: dict[tuple[str, bool], list[tuple[str, str]]] = {}
        for column in await conn.fetch(q.TEXT_COLUMNS, self._schema):
            key = (column["table_name"], column["has_tenant"])
            tables.setdefault(key, []).append((column["column_name"], column["data_type"]))
        found: dict[str, int] = {}
        for (table, has_tenant), columns in tables.items():
            sql = q.content_matches(self._schema, table, columns, has_tenant)
            args: builtins.list[object] = [wanted, sorted(erased.lengths)]
            if has_tenant:
                args.append(tenant)
            row = await conn.fetchrow(sql, *args)
            found.update({f"{table}.{name}": count for name, count in row.items() if count})
        return found


@dataclass
class _Erased:
    """What this run erased, for the verification: ids, and the contents' hashes and sizes."""

    ids: list[tuple[str, uuid.UUID]] = field(default_factory=list)
    hashes: set[str] = field(default_factory=set)
    lengths: set[int] = field(default_factory=set)


@dataclass
class _Batch:
    rows: list[Any]
    members: int
    counts: Any
