"""Garbage collection: expired memories, checkpoints past retention, idle sessions,
change events past ``Settings.change_retention_days``; weak memories forgotten
(when a half-life policy is set) and forgotten ones deleted after
``Settings.forget_grace_days`` (see :mod:`memsvc.ops.forget`).

gc also persists the commit time of history events (``committed_at``, read
by as-of reads) before the server forgets it; it never deletes history. The
``deleted`` events of its expired batches need no such copy: they are
written with their time (see ``DELETED_COMMITTED_AT`` in the memory queries).

Work happens in bounded batches, each its own short transaction, with rows
locked ``FOR UPDATE SKIP LOCKED``: any number of gc workers (processes,
or the service's background task) can run at once, each deleting rows no
other worker holds, so every expired row is deleted exactly once, and a
writer holding a row is never waited for.

Memories are deleted the way :meth:`MemoryRepository.delete` deletes them:
the service's delete hook first (assemblies drop the memory and update
their counts and centroid, under the assembly row locks), then the row with
its ``deleted`` history event in one statement. Lock order is the
repositories' (memory rows, then assemblies), so gc never deadlocks with
them.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import asyncpg

from memsvc.changes import queries as feed_q
from memsvc.changes.feed import START, Position
from memsvc.checkpoints.repository import CheckpointRepository
from memsvc.core.errors import CitusUnsupportedError, ConcurrencyError, ValidationError
from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.core.time_limits import validate_duration
from memsvc.db.cluster import citus_installed
from memsvc.db.errors import translate_errors
from memsvc.db.sql import Params, scope_condition
from memsvc.langgraph_db import store_queries as store_q
from memsvc.langgraph_db.store_indexes import NamespaceIndexes
from memsvc.memories.asof_queries import SHOW_TRACKING
from memsvc.memories.repository import MemoryRepository
from memsvc.ops import gc_queries as q
from memsvc.ops.forget import Forgetting
from memsvc.progress import NO_PROGRESS, ProgressReporter

T = TypeVar("T")

DEFAULT_BATCH = 500
MAX_BATCH = 10_000
# Idle sessions and over-retention sessions handled per run; the next run takes the rest.
SESSIONS_PER_RUN = 1_000
ATTEMPTS = 4


@dataclass
class GcReport:
    """What one gc run deleted."""

    expired_deleted: int = 0
    store_items_expired: int = 0
    namespace_indexes_dropped: int = 0
    scope_indexes_built: int = 0
    scope_indexes_dropped: int = 0
    checkpoints_pruned: int = 0
    idle_sessions: int = 0
    idle_memories_deleted: int = 0
    idle_assemblies_deleted: int = 0
    idle_checkpoints_deleted: int = 0
    commit_times_persisted: int = 0
    change_events_removed: int = 0
    memories_forgotten: int = 0
    forgotten_deleted: int = 0
    batches: int = 0
    seconds: float = 0.0

    @property
    def total(self) -> int:
        """Rows deleted, all kinds."""
        return (
            self.expired_deleted
            + self.store_items_expired
            + self.checkpoints_pruned
            + self.idle_memories_deleted
            + self.idle_assemblies_deleted
            + self.idle_checkpoints_deleted
            + self.change_events_removed
            + self.forgotten_deleted
        )


class GarbageCollector:
    """Runs the gc passes on a pool; see the module docstring."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: Settings,
        *,
        memories: MemoryRepository,
        checkpoints: CheckpointRepository,
        forgetting: Forgetting | None = None,
    ) -> None:
        self._pool = pool
        self._forgetting = forgetting or Forgetting(pool, settings, memories=memories)
        self._settings = settings
        self._schema = settings.db_schema
        self._memories = memories
        self._checkpoints = checkpoints
        self._store_indexes = NamespaceIndexes(pool, settings)
        self._citus: bool | None = None

    async def run(
        self,
        *,
        batch_size: int = DEFAULT_BATCH,
        idle_session_days: float | None = None,
        max_batches: int | None = None,
        progress: ProgressReporter = NO_PROGRESS,
    ) -> GcReport:
        """Delete expired memories and store items, prune checkpoints, (optionally) idle sessions.

        Args:
            batch_size: Rows per transaction (1-10000).
            idle_session_days: Also remove sessions with no activity for this
                many days (their memories, assemblies and checkpoints); None: never.
            max_batches: Stop deleting expired memories after this many batches
                (the next run continues); None: until none is left.
            progress: Told each pass as a step, and the rows (or sessions) it deletes.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int):
            raise ValidationError("batch_size", "must be an integer")
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValidationError("batch_size", f"must be between 1 and {MAX_BATCH}")
        if idle_session_days is not None:
            # Bounded: its cutoff (now minus it) must be a time Python represents.
            idle_session_days = validate_duration(idle_session_days, "idle_session_days", "days")
        if self._settings.change_retention_days is not None and await self._on_citus():
            raise CitusUnsupportedError(
                "gc with change_retention_days",
                "the change feed's retention removes a prefix of one feed order, and each "
                "Citus node keys its events in an order of its own; unset it on Citus",
            )
        started = time.perf_counter()
        report = GcReport()
        progress.start("gc: deleting expired memories")
        while max_batches is None or report.batches < max_batches:
            deleted = await self._retrying(lambda: self._delete_expired_batch(batch_size))
            report.batches += 1
            report.expired_deleted += deleted
            progress.advance(deleted)
            if deleted < batch_size:
                break  # none left (or only rows other workers hold right now)
        await self._forget(batch_size, report, progress)
        progress.start("gc: deleting expired store items")
        while True:
            deleted = await self._retrying(lambda: self._delete_expired_store_items(batch_size))
            report.batches += 1
            report.store_items_expired += deleted
            progress.advance(deleted)
            if deleted < batch_size:
                break
        # Namespaces that emptied (expired, deleted) leave their indexes to gc.
        progress.start("gc: dropping namespace indexes of emptied store namespaces")
        report.namespace_indexes_dropped = await self._store_indexes.collect()
        # Scopes that grew past Settings.scope_index_from get their own
        # index; invalid, emptied and shrunken ones are dropped (and the
        # invalid ones of big scopes built again).
        progress.start("gc: building and dropping scope indexes of memories")
        scope_indexes = await self._memories.scope_indexes.maintain()
        report.scope_indexes_built = len(scope_indexes.built) + len(scope_indexes.subtrees_built)
        report.scope_indexes_dropped = scope_indexes.dropped
        report.checkpoints_pruned = await self._prune_checkpoints(progress)
        await self._persist_commit_times(batch_size, report, progress)
        if idle_session_days is not None:
            cutoff = datetime.now(UTC) - timedelta(days=idle_session_days)
            await self._remove_idle_sessions(cutoff, batch_size, report, progress)
        if self._settings.change_retention_days is not None:
            cutoff = datetime.now(UTC) - timedelta(days=self._settings.change_retention_days)
            progress.start("gc: removing change events past retention")
            remove = functools.partial(self._remove_old_events, cutoff, batch_size)
            while True:
                removed = await self._retrying(remove)
                report.batches += 1
                report.change_events_removed += removed
                progress.advance(removed)
                if removed < batch_size:
                    break
        progress.done()
        report.seconds = time.perf_counter() - started
        return report

    async def _forget(self, batch_size: int, report: GcReport, progress: ProgressReporter) -> None:
        """Forget weak memories when a policy is set; delete those past their grace period."""
        if await self._forgetting.any_policy():
            progress.start("gc: forgetting weak memories")
            forgotten = await self._forgetting.forget(
                below=self._settings.forget_below, batch_size=batch_size
            )
            report.memories_forgotten = forgotten.forgotten
            report.batches += forgotten.batches
            progress.advance(forgotten.forgotten)
        progress.start("gc: deleting memories forgotten past their grace period")
        while True:
            deleted = await self._forgetting.delete_forgotten(batch_size)
            report.batches += 1
            report.forgotten_deleted += deleted
            progress.advance(deleted)
            if deleted < batch_size:
                break

    async def _retrying(self, attempt: Callable[[], Awaitable[T]]) -> T:
        # Deadlocks cannot arise from gc's own lock order, but a lock timeout
        # on an assembly row held by a long transaction can: try again.
        for tries in range(1, ATTEMPTS + 1):
            try:
                return await attempt()
            except ConcurrencyError:
                if tries == ATTEMPTS:
                    raise
                await asyncio.sleep(0.05 * tries)
        raise AssertionError("unreachable")

    async def _on_citus(self) -> bool:
        if self._citus is None:
            with translate_errors():
                async with self._pool.acquire() as conn:
                    self._citus = await citus_installed(conn)
        return self._citus

    async def _tenants(self, sql: str, batch_size: int) -> list[str] | None:
        """On Citus, the tenants a pass must visit one by one; None on one server.

        Citus locks rows (FOR UPDATE) only in a statement routed to one
        shard, so there a pass finds its tenants first, without a lock, then
        runs its statement per tenant.
        """
        if not await self._on_citus():
            return None
        with translate_errors():
            async with self._pool.acquire() as conn:
                return [row["tenant_id"] for row in await conn.fetch(sql, batch_size)]

    async def _delete_expired_batch(self, batch_size: int) -> int:
        tenants = await self._tenants(q.expired_tenants(self._schema), batch_size)
        if tenants is None:
            with translate_errors():
                async with self._pool.acquire() as conn, conn.transaction():
                    rows = await conn.fetch(q.lock_expired(self._schema), batch_size)
                    return await self._memories.delete_locked(conn, rows)
        deleted = 0
        for tenant in tenants:
            with translate_errors():
                async with self._pool.acquire() as conn, conn.transaction():
                    rows = await conn.fetch(
                        q.lock_expired(self._schema, tenant_filter=True), batch_size, tenant
                    )
                    deleted += await self._memories.delete_locked(conn, rows)
        return deleted

    async def _persist_commit_times(
        self, batch_size: int, report: GcReport, progress: ProgressReporter
    ) -> None:
        """Copy events' commit timestamps into ``committed_at`` (see the queries module).

        Without ``track_commit_timestamp`` there is nothing to copy (and as-of
        reads refuse to run), so the pass is skipped.
        """
        with translate_errors():
            async with self._pool.acquire() as conn:
                if not await conn.fetchval(SHOW_TRACKING):
                    return
        progress.start("gc: persisting commit times of history events")
        sql = q.persist_commit_times(self._schema)
        per_tenant = q.persist_tenant_commit_times(self._schema)

        async def batch() -> int:
            tenants = await self._tenants(q.uncommitted_tenants(self._schema), batch_size)
            with translate_errors():
                async with self._pool.acquire() as conn:
                    if tenants is None:
                        done: int = await conn.fetchval(sql, batch_size)
                        return done
                    return sum([await conn.fetchval(per_tenant, batch_size, t) for t in tenants])

        while True:
            done = await self._retrying(batch)
            report.batches += 1
            report.commit_times_persisted += done
            progress.advance(done)
            if done < batch_size:
                break

    async def _delete_expired_store_items(self, batch_size: int) -> int:
        # LangGraph store items (MemsvcStore) past their TTL; their vectors cascade.
        tenants = await self._tenants(q.expired_store_tenants(self._schema), batch_size)
        with translate_errors():
            async with self._pool.acquire() as conn:
                if tenants is None:
                    deleted: int = await conn.fetchval(
                        store_q.sweep_expired(self._schema, None), batch_size
                    )
                    return deleted
                sql = store_q.sweep_expired(self._schema, "$2")
                return sum([await conn.fetchval(sql, batch_size, t) for t in tenants])

    async def _remove_old_events(self, cutoff: datetime, batch_size: int) -> int:
        """Remove the oldest events of the feed, up to the first one newer than the cutoff.

        gc removes a prefix of the feed (in its order), so the horizon it
        records, the last position removed, divides the feed exactly: all
        before it is gone, all after it kept. It is written in the same
        transaction as the deletion, and a feed reads both in one snapshot,
        so a consumer behind it gets CursorExpiredError, never a silent gap.
        Batches run one at a time (they lock the horizon).
        """
        with translate_errors():
            async with self._pool.acquire() as conn, conn.transaction():
                await conn.execute(feed_q.seed_horizon(self._schema))
                text = await conn.fetchval(feed_q.lock_horizon(self._schema))
                horizon = Position.parse(text, "horizon") if text else START
                head = await conn.fetch(
                    feed_q.feed_head(self._schema),
                    str(horizon.key),
                    horizon.bound(feed_q.MEMORY_SOURCE),
                    horizon.bound(feed_q.ENTITY_SOURCE),
                    batch_size,
                )
                doomed: dict[int, tuple[list[str], list[int]]] = {
                    feed_q.MEMORY_SOURCE: ([], []),
                    feed_q.ENTITY_SOURCE: ([], []),
                }
                last = None
                for row in head:
                    if row["at"] >= cutoff:
                        break
                    tenants, event_ids = doomed[row["source"]]
                    tenants.append(row["tenant_id"])
                    event_ids.append(row["event_id"])
                    last = Position(int(row["change_key"]), row["source"], row["event_id"])
                if last is None:
                    return 0
                for table, source in feed_q.SOURCES.items():
                    tenants, event_ids = doomed[source]
                    if not event_ids:
                        continue
                    # Memory events are history too: removing them moves the
                    # horizon as-of reads can rebuild from.
                    sql = (
                        q.delete_history_events(self._schema)
                        if table == "memory_events"
                        else feed_q.delete_events(self._schema, table)
                    )
                    await conn.execute(sql, tenants, event_ids)
                await conn.execute(feed_q.set_horizon(self._schema), last.cursor())
                return sum(len(ids) for _, ids in doomed.values())

    async def _prune_checkpoints(self, progress: ProgressReporter) -> int:
        keep = self._settings.checkpoint_keep_last
        with translate_errors():
            async with self._pool.acquire() as conn:
                sessions = await conn.fetch(
                    q.sessions_over_retention(self._schema), keep, SESSIONS_PER_RUN
                )
        pruned = 0
        progress.start(
            "gc: pruning checkpoints past retention", total=len(sessions), unit="sessions"
        )
        for row in sessions:
            scope = Scope.trusted(
                row["tenant_id"], row["project_id"], row["agent_id"], row["session_id"]
            )
            # The repository's prune takes the session's lock, like create.
            count = await self._checkpoints.prune(scope, keep)
            pruned += count
            progress.advance(1)
        return pruned

    async def _remove_idle_sessions(
        self, cutoff: datetime, batch_size: int, report: GcReport, progress: ProgressReporter
    ) -> None:
        with translate_errors():
            async with self._pool.acquire() as conn:
                sessions = await conn.fetch(q.idle_sessions(self._schema), cutoff, SESSIONS_PER_RUN)
        progress.start("gc: removing idle sessions", total=len(sessions), unit="sessions")
        for row in sessions:
            scope = Scope.trusted(
                row["tenant_id"], row["project_id"], row["agent_id"], row["session_id"]
            )
            await self._remove_idle_session(scope, cutoff, batch_size, report)
            report.idle_sessions += 1
            progress.advance(1)

    async def _remove_idle_session(
        self, scope: Scope, cutoff: datetime, batch_size: int, report: GcReport
    ) -> None:
        params = Params()
        scope_sql = scope_condition(scope, "exact", params)
        cutoff_param = params.add(cutoff)
        # Assemblies first: their memberships go with them, so deleting the
        # memories afterwards has no assembly to update.
        with translate_errors():
            async with self._pool.acquire() as conn:
                report.idle_assemblies_deleted += await conn.fetchval(
                    q.delete_idle_assemblies(self._schema, scope_sql, cutoff_param),
                    *params.values,
                )
        lock_sql = q.lock_idle_memories(
            self._schema, scope_sql, cutoff_param, params.add(batch_size)
        )

        async def batch() -> int:
            with translate_errors():
                async with self._pool.acquire() as conn, conn.transaction():
                    rows = await conn.fetch(lock_sql, *params.values)
                    return await self._memories.delete_locked(conn, rows)

        while True:
            deleted = await self._retrying(batch)
            report.idle_memories_deleted += deleted
            report.batches += 1
            if deleted < batch_size:
                break
        checkpoint_sql = q.delete_idle_checkpoints(self._schema, scope_sql, cutoff_param)
        with translate_errors():
            async with self._pool.acquire() as conn:
                report.idle_checkpoints_deleted += await conn.fetchval(
                    checkpoint_sql, *params.values[:-1]
                )
