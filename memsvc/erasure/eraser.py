"""Erasure that leaves nothing: ``svc.erase(scope)`` and ``memsvc erase``.

``delete`` and ``delete_scope`` keep each memory's content in its history
(audit). Erasure removes a scope's memories together with every event of
their history, memberships (surviving assemblies are recomputed), the
scope's assemblies and session checkpoints with their ledger events, the
ids of the messages ``svc.remember`` recorded as remembered, the half-life
policies set on the scope and below it, LangGraph
rows when the scope is a whole tenant, and working memory; it
leaves one content-free ``erased`` event per memory (and the ``deleted``
ledger event of each assembly and checkpoint), so feeds and audits see that
something was erased, and when. Those keep the ids the caller named; ids
below them become pseudonyms (see :meth:`ErasurePlan.kept`).

History belongs to the scope its events name: a memory id used again in
another scope after a delete keeps each scope's history apart.

It works in batches, each its own short transaction, in an order that makes
every batch complete on its own: a crash loses at most the batch in flight
(rolled back), and running it again finishes the work (idempotent). It then
checks with real queries that nothing of the scope remains (see
:mod:`memsvc.erasure.check`). Memory stays flat whatever the tenant's
size: batches are bounded, what was removed is kept as fingerprints in a
temporary file, working memory is erased as a SCAN finds it.

Writers racing an erasure: the erasure takes a snapshot when it begins, and
what had committed then is gone when it returns (each batch reads the latest
committed rows, and the passes run until one finds nothing). The cut is by
the creating transaction (``created_xid``), never by ``created_at``, which an
import may supply. A write committing while it runs is either erased whole
(row and history, as one batch) or kept whole (row with its full history);
such rows are counted in ``written_during``, and a second run erases them.

Working memory must be reached where it lives: with Redis configured, the
erasure pings it first (a bounded retry) and fails with
:class:`~memsvc.core.errors.RedisUnavailableError` before writing anything when
it does not answer, also when the service runs on the in-process fallback.
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import asyncpg

from memsvc.assemblies.repository import AssemblyRepository
from memsvc.core.errors import MemsvcError, ValidationError, WorkingMemoryError
from memsvc.core.scope import Include, Scope, validate_include
from memsvc.core.settings import Settings
from memsvc.core.validation import validate_limit, validate_scope
from memsvc.db.errors import translate_errors
from memsvc.db.replicas import ReadRouter
from memsvc.db.repository import Repository
from memsvc.db.sql import Params
from memsvc.erasure import queries as q
from memsvc.erasure.check import ErasureCheck
from memsvc.erasure.plan import ErasurePlan
from memsvc.erasure.receipt import ErasureReceipt
from memsvc.erasure.texts import ErasedTexts
from memsvc.langgraph_db.checkpoints import LangGraphCheckpointRepository
from memsvc.langgraph_db.store_indexes import NamespaceIndexes
from memsvc.memories.scope_indexes import ScopeIndexes
from memsvc.progress import NO_PROGRESS, ProgressReporter
from memsvc.working import WorkingStore

T = TypeVar("T")

DEFAULT_BATCH = 500
MAX_BATCH = 10_000

Vacuum = bool | Literal["full"]


class Erasure(Repository):
    """Runs erasures on the service's pool (``svc.erase``)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: Settings,
        *,
        assemblies: AssemblyRepository,
        langgraph_threads: LangGraphCheckpointRepository,
        namespace_indexes: NamespaceIndexes,
        working_store: WorkingStore,
        reads: ReadRouter | None = None,
        scope_indexes: ScopeIndexes | None = None,
    ) -> None:
        super().__init__(pool, settings, reads=reads)
        self._assemblies = assemblies
        self._scope_indexes = scope_indexes or ScopeIndexes(pool, settings)
        self._working_store = working_store
        self._langgraph = langgraph_threads
        self._store_indexes = namespace_indexes
        self._check = ErasureCheck(pool, settings, working_store=working_store)

    async def erase(
        self,
        scope: Scope,
        *,
        include: Include = "descendants",
        batch_size: int = DEFAULT_BATCH,
        progress: ProgressReporter = NO_PROGRESS,
        vacuum: Vacuum = False,
    ) -> ErasureReceipt:
        """Erase everything memsvc holds for ``scope``; see the module docstring.

        Args:
            scope: What to erase; with ``include="descendants"`` (default) also
                every scope under it, with ``"exact"`` only rows of exactly it.
            include: ``"descendants"`` or ``"exact"`` (``"ancestors"`` would
                erase other scopes' rows and is refused).
            batch_size: Rows (or LangGraph threads) per transaction.
            progress: Told each pass as a step and each batch's rows.
            vacuum: ``True``: ``VACUUM`` the tables the erasure changed
                afterwards; ``"full"``: ``VACUUM FULL`` them (rewrites each
                table under an exclusive lock). See docs/how-to/erasure.md on what
                PostgreSQL keeps either way.

        Raises:
            RedisUnavailableError: Redis is configured and did not answer;
                nothing was erased.
        """
        scope = validate_scope(scope)
        include = validate_include(include)
        if include == "ancestors":
            raise ValidationError("include", "must be 'descendants' or 'exact' for erase")
        batch_size = validate_limit(batch_size, "batch_size", MAX_BATCH)
        if vacuum not in (False, True, "full"):
            raise ValidationError("vacuum", "must be False, True or 'full'")
        progress.start("reaching working memory", total=None)
        where = await self._working_store.reach()
        async with self._transaction(tenant=scope.tenant) as conn:
            await conn.fetchval(q.current_epoch(self._schema))
        async with self._transaction(tenant=scope.tenant) as conn:
            cut = await conn.fetchrow(q.CUT)
        with ErasedTexts() as texts:
            plan = ErasurePlan(scope, include, batch_size, cut["snapshot"], texts)
            receipt = ErasureReceipt(
                scope=scope, include=include, started=cut["started"],
                langgraph=plan.whole_tenant, working_memory=where, kept=plan.kept(),
            )
            await self._erase(plan, receipt, progress)
            progress.start("verifying", total=None)
            await self._check.verify(plan, receipt)
            await self._check_scope_indexes(plan, receipt)
            if plan.whole_tenant:
                await self._check_namespace_indexes(plan.scope.tenant, receipt)
        if vacuum:
            progress.start("vacuuming", total=None)
            receipt.vacuum = await self._vacuum(plan.whole_tenant, full=vacuum == "full")
        progress.done()
        return receipt

    async def _erase(
        self, plan: ErasurePlan, receipt: ErasureReceipt, progress: ProgressReporter
    ) -> None:
        progress.start("erasing assemblies")
        await self._erase_assemblies(plan, receipt, progress)
        progress.start("erasing memories and their history")
        await self._erase_memories(plan, receipt, progress)
        progress.start("erasing the history of deleted memories")
        await self._erase_histories(plan, receipt, progress)
        progress.start("erasing session checkpoints")
        await self._erase_checkpoints(plan, receipt, progress)
        progress.start("erasing the ids of remembered messages")
        await self._erase_remembered(plan, receipt, progress)
        progress.start("erasing half-life policies")
        await self._erase_policies(plan, receipt, progress)
        # A scope index names its scope's ids in its predicate: it goes with
        # the rows (a build still running is waited for; one starting later
        # finds no rows).
        progress.start("dropping scope indexes", total=None)
        dropped = await self._scope_indexes.drop_within(plan.scope, plan.include)
        receipt.add("scope_indexes", dropped)
        if plan.whole_tenant:
            progress.start("erasing LangGraph checkpoints and store items")
            await self._erase_langgraph(plan.scope.tenant, plan.batch_size, receipt)
        progress.start("erasing ledger events and ids below the scope")
        await self._erase_ledger(plan, receipt, progress)
        progress.start("erasing working memory", total=None, unit="sessions")
        receipt.add("working_sessions", await self._erase_sessions(plan))

    # ------------------------------------------------------------------ passes

    async def _batches(
        self,
        run: Callable[[asyncpg.Connection], Awaitable[dict[str, int]]],
        receipt: ErasureReceipt,
        progress: ProgressReporter,
        *,
        tenant: str,
    ) -> None:
        """Call ``run(conn)``, each time in its own transaction, until it removes nothing.

        ``run`` returns the rows it removed per table; they are counted once
        its transaction committed (a retried attempt would count twice).
        """
        while True:

            async def attempt() -> dict[str, int]:
                async with self._transaction(tenant=tenant) as active:
                    return await run(active)

            counts = await self._retrying(attempt, owns_transaction=True)
            if not any(counts.values()):
                return
            for table, count in counts.items():
                receipt.add(table, count)
            progress.advance(sum(counts.values()))

    @staticmethod
    def _texts_removed(texts: ErasedTexts, row: Any) -> None:
        """Keep what a committed batch removed, for the check."""
        texts.add(row["fingerprints"], row["substring_texts"], more=row["more_texts"])

    async def _erase_assemblies(
        self, plan: ErasurePlan, receipt: ErasureReceipt, progress: ProgressReporter
    ) -> None:
        params = Params()
        lock_sql = q.lock_assemblies_batch(
            self._schema, plan.scope_sql(params), params.add(plan.snapshot),
            params.add(plan.batch_size),
        )
        delete_sql = q.delete_assemblies(self._schema)
        texts = plan.texts

        async def run(conn: asyncpg.Connection) -> Any:
            rows = await conn.fetch(lock_sql, *params.values)
            if not rows:
                return None
            return await conn.fetchrow(
                delete_sql, [r["tenant_id"] for r in rows], [r["id"] for r in rows],
                texts.key, texts.texts_left, texts.bytes_left,
            )

        async for row in self._each_batch(run, tenant=plan.scope.tenant):
            self._texts_removed(texts, row)
            receipt.add("assemblies", row["assemblies"])
            receipt.add("assembly_members", row["members"])
            receipt.add("entity_events", row["entity_events"])
            progress.advance(row["assemblies"])

    async def _each_batch(
        self, run: Callable[[asyncpg.Connection], Awaitable[T | None]], *, tenant: str
    ) -> AsyncIterator[T]:
        """Yield the result of ``run(conn)``, each in its own transaction, until it is None."""
        while True:

            async def attempt() -> T | None:
                async with self._transaction(tenant=tenant) as active:
                    return await run(active)

            row = await self._retrying(attempt, owns_transaction=True)
            if row is None:
                return
            yield row

    async def _erase_memories(
        self, plan: ErasurePlan, receipt: ErasureReceipt, progress: ProgressReporter
    ) -> None:
        params = Params()
        lock_sql = q.lock_memories_batch(
            self._schema, plan.scope_sql(params), params.add(plan.snapshot),
            params.add(plan.batch_size),
        )
        erase_sql = q.erase_memories(self._schema, plan.depth)
        texts = plan.texts

        async def run(conn: asyncpg.Connection) -> _Batch | None:
            rows = await conn.fetch(lock_sql, *params.values)
            if not rows:
                return None
            tenants = [r["tenant_id"] for r in rows]
            ids = [r["id"] for r in rows]
            members = await self._assemblies.erase_memberships(conn, tenants, ids)
            counts = await conn.fetchrow(
                erase_sql, tenants, ids, texts.key, texts.texts_left, texts.bytes_left,
                *plan.pseudonym_args,
            )
            return _Batch(members, counts)

        async for batch in self._each_batch(run, tenant=plan.scope.tenant):
            counts = batch.counts
            self._texts_removed(texts, counts)
            receipt.add("memories", counts["memories"])
            receipt.add("memory_events", counts["events"])
            receipt.add("tombstones", counts["tombstones"])
            receipt.add("assembly_members", batch.members)
            progress.advance(counts["memories"])

    async def _erase_histories(
        self, plan: ErasurePlan, receipt: ErasureReceipt, progress: ProgressReporter
    ) -> None:
        params = Params()
        scope_sql = plan.scope_sql(params, "e")
        after = params.add(uuid.UUID(int=0))
        select_sql = q.deleted_memories_batch(
            self._schema, scope_sql, after, params.add(plan.batch_size)
        )
        erase_sql = q.erase_histories(self._schema, plan.depth)
        texts = plan.texts

        async def run(conn: asyncpg.Connection) -> tuple[builtins.list[Any], Any] | None:
            rows = await conn.fetch(select_sql, *params.values)
            if not rows:
                return None
            keys = [f"{self._schema}:{r['tenant_id']}:{r['memory_id']}" for r in rows]
            await conn.execute(q.LOCK_HISTORIES, keys)
            columns = [[r[name] for r in rows] for name in q.HISTORY_KEY]
            counts = await conn.fetchrow(
                erase_sql, *columns, texts.key, texts.texts_left, texts.bytes_left,
                *plan.pseudonym_args,
            )
            return rows, counts

        async for rows, counts in self._each_batch(run, tenant=plan.scope.tenant):
            # The scope's tenant is fixed, so the id alone orders the keyset;
            # from the last id on (>=): one id may have histories in several scopes.
            params.values[int(after[1:]) - 1] = rows[-1]["memory_id"]
            self._texts_removed(texts, counts)
            receipt.add("memory_events", counts["events"])
            receipt.add("tombstones", counts["tombstones"])
            progress.advance(len(rows))

    async def _erase_checkpoints(
        self, plan: ErasurePlan, receipt: ErasureReceipt, progress: ProgressReporter
    ) -> None:
        texts = plan.texts

        async def run(conn: asyncpg.Connection) -> Any:
            params = Params()
            sql = q.delete_checkpoints_batch(
                self._schema, plan.scope_sql(params), params.add(plan.snapshot),
                params.add(plan.batch_size), params.add(texts.key),
                params.add(texts.texts_left), params.add(texts.bytes_left),
            )
            row = await conn.fetchrow(sql, *params.values)
            return row if row["checkpoints"] else None

        async for row in self._each_batch(run, tenant=plan.scope.tenant):
            self._texts_removed(texts, row)
            receipt.add("session_checkpoints", row["checkpoints"])
            receipt.add("entity_events", row["entity_events"])
            progress.advance(row["checkpoints"])

    async def _erase_remembered(
        self, plan: ErasurePlan, receipt: ErasureReceipt, progress: ProgressReporter
    ) -> None:
        """The scope's rows of the ``svc.remember`` ledger (message ids, nothing else)."""
        params = Params()
        sql = q.delete_remembered_batch(
            self._schema, plan.scope_sql(params), params.add(plan.snapshot),
            params.add(plan.batch_size),
        )

        async def run(conn: asyncpg.Connection) -> dict[str, int]:
            return {"remembered_messages": await conn.fetchval(sql, *params.values)}

        await self._batches(run, receipt, progress, tenant=plan.scope.tenant)

    async def _erase_policies(
        self, plan: ErasurePlan, receipt: ErasureReceipt, progress: ProgressReporter
    ) -> None:
        """The scope's half-life policies (they hold its ids, nothing remembered)."""
        params = Params()
        sql = q.delete_policies(self._schema, plan.scope_sql(params))

        async def run(conn: asyncpg.Connection) -> dict[str, int]:
            return {"memory_policies": await conn.fetchval(sql, *params.values)}

        await self._batches(run, receipt, progress, tenant=plan.scope.tenant)

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

        await self._batches(run, receipt, NO_PROGRESS, tenant=tenant)
        # The store's namespace indexes name the tenant and its namespaces in
        # their predicates: they go with the rows (a build still running
        # anywhere is waited for; one starting later finds no rows).
        receipt.add("namespace_indexes", await self._store_indexes.drop_tenant(tenant))

    async def _check_scope_indexes(self, plan: ErasurePlan, receipt: ErasureReceipt) -> None:
        """No index of memories may name a scope within the erased one."""
        left = len(await self._scope_indexes.within(plan.scope, plan.include))
        if left:
            receipt.remaining["scope_indexes"] = left
            receipt.verified = False

    async def _check_namespace_indexes(self, tenant: str, receipt: ErasureReceipt) -> None:
        """Index definitions hold the tenant and namespace labels too: none may be left."""
        left = len(await self._store_indexes.of_tenant(tenant))
        if left:
            receipt.remaining["namespace_indexes"] = left
            receipt.verified = False

    async def _erase_ledger(
        self, plan: ErasurePlan, receipt: ErasureReceipt, progress: ProgressReporter
    ) -> None:
        """Ledger events of assemblies and checkpoints deleted before, and ids below the scope.

        The passes above leave nothing else; this one finds what ``delete``,
        an older erasure or a crashed run left: ``created``/``updated``
        events of assemblies and checkpoints no longer there, and real ids
        below the named level in tombstones and ``deleted`` ledger events.
        """
        params = Params()
        scope_sql = plan.scope_sql(params, "e")
        after = params.add(0)
        sql = q.delete_gone_entity_events(
            self._schema, scope_sql, after, params.add(plan.batch_size)
        )
        await self._event_batches(
            sql, params, after, "entity_events", receipt, progress, tenant=plan.scope.tenant
        )
        if plan.depth == 3:
            return  # nothing below the named level
        for table, kind in (("entity_events", "deleted"), ("memory_events", "erased")):
            params = Params()
            scope_sql = plan.scope_sql(params, "e")
            key = params.add(plan.pseudonym_key)
            after = params.add(0)
            sql = q.pseudonymize_batch(
                self._schema, table, kind, scope_sql, plan.depth, key, after,
                params.add(plan.batch_size),
            )
            await self._event_batches(
                sql, params, after, "pseudonymized", receipt, progress, tenant=plan.scope.tenant
            )

    async def _event_batches(
        self, sql: str, params: Params, after: str, counted: str, receipt: ErasureReceipt,
        progress: ProgressReporter, *, tenant: str,
    ) -> None:
        """Run ``sql`` (returning event ids) batch after batch, each resuming after the last."""

        async def run(conn: asyncpg.Connection) -> builtins.list[Any] | None:
            return await conn.fetch(sql, *params.values) or None

        async for rows in self._each_batch(run, tenant=tenant):
            params.values[int(after[1:]) - 1] = max(row["event_id"] for row in rows)
            receipt.add(counted, len(rows))
            progress.advance(len(rows))

    async def _erase_sessions(self, plan: ErasurePlan) -> int:
        """Drop the working memory of every session of the scope.

        A failure is retried once after Redis answers again (the erase is a
        SCAN and deletes: running it twice is harmless).
        """
        descendants = plan.include == "descendants"
        try:
            return await self._working_store.erase_sessions(plan.scope, descendants=descendants)
        except WorkingMemoryError:
            await self._working_store.reach()
            return await self._working_store.erase_sessions(plan.scope, descendants=descendants)

    # ------------------------------------------------------------------ vacuum

    async def _vacuum(self, whole_tenant: bool, *, full: bool) -> dict[str, str]:
        """VACUUM (or VACUUM FULL) the tables an erasure changes; per table, what happened.

        Without the service's statement timeout (a big table takes longer),
        with its lock timeout (VACUUM FULL waiting for its exclusive lock
        would queue every other reader behind it). A table that fails is
        reported, not raised: the erasure itself is done.
        """
        tables = list(q.ERASED_TABLES) + (list(q.LANGGRAPH_TABLES) if whole_tenant else [])
        done: dict[str, str] = {}
        # Behind pgbouncer the connection's settings are not ours to change.
        own_timeout = not self._settings.pgbouncer
        with translate_errors():
            async with self._pooled() as conn:
                rows = await conn.fetch(q.VACUUMABLE, self._schema, tables)
                if own_timeout:
                    await conn.execute(q.NO_STATEMENT_TIMEOUT)
                try:
                    for row in rows:
                        done[row["relname"]] = await self._vacuum_table(
                            conn, row["relname"], allowed=row["allowed"], full=full
                        )
                finally:
                    if own_timeout:
                        await conn.execute(q.RESET_STATEMENT_TIMEOUT)
        return done

    async def _vacuum_table(
        self, conn: asyncpg.Connection, table: str, *, allowed: bool, full: bool
    ) -> str:
        if not allowed:
            return "skipped: this role does not own the table (run as its owner)"
        try:
            with translate_errors():
                await conn.execute(q.vacuum(self._schema, table, full=full))
        except MemsvcError as exc:
            return f"failed: {type(exc).__name__}: {exc}"
        return "vacuumed (full)" if full else "vacuumed"


@dataclass
class _Batch:
    members: int
    counts: Any
