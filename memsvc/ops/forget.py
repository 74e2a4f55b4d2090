"""Forgetting: memories whose strength fell below a floor leave every read.

A forget pass (``svc.maintenance.forget``, and ``memsvc gc`` when a policy
is set) takes the memories of the scopes under a half-life policy whose
strength (:mod:`memsvc.memories.strength`) is below ``below`` and sets their
``forgotten_at``: search, list and count no longer see them, ``get`` by id
still returns them (with ``forgotten_at``), and ``svc.memories.restore``
brings one back within ``Settings.forget_grace_days``. After that gc
deletes them the way ``delete`` does (the ``deleted`` history event kept,
assemblies detached).

Never forgotten: keyed memories (``put``), pinned ones, and members of an
assembly unless the pass is asked to (``assembly_members=True``).

Each batch is one statement that locks its rows ``FOR UPDATE SKIP LOCKED``
and re-checks the conditions on their latest version, so passes can run
from several workers at once, and a memory accessed, restored or pinned
while a pass runs is either renewed before the pass reaches it (and kept)
or forgotten first (and then renewed or restored by the other writer).
"""

from __future__ import annotations

import builtins
import uuid
from dataclasses import dataclass, field
from datetime import datetime

import asyncpg

from memsvc.core.errors import ValidationError
from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.core.time_limits import validate_time
from memsvc.core.validation import validate_importance, validate_limit, validate_scope
from memsvc.db.replicas import ReadRouter
from memsvc.db.repository import Repository
from memsvc.db.sql import Params, scope_condition
from memsvc.memories.repository import MemoryRepository
from memsvc.ops import forget_queries as q

DEFAULT_BATCH = 500
MAX_BATCH = 10_000
_START = ("", uuid.UUID(int=0))


@dataclass
class ForgetReport:
    """What a forget pass did (or, with ``dry_run``, would do)."""

    forgotten: int = 0
    ids: list[uuid.UUID] = field(default_factory=list)
    dry_run: bool = False
    batches: int = 0


class Forgetting(Repository):
    """Forget passes and the deletion of memories forgotten past their grace period."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: Settings,
        *,
        memories: MemoryRepository,
        reads: ReadRouter | None = None,
    ) -> None:
        super().__init__(pool, settings, reads=reads)
        self._memories = memories

    async def forget(
        self,
        scope: Scope | None = None,
        *,
        below: float = 0.05,
        dry_run: bool = False,
        now: datetime | None = None,
        assembly_members: bool = False,
        batch_size: int = DEFAULT_BATCH,
    ) -> ForgetReport:
        """Forget the memories (of ``scope`` and below; None: everywhere) weaker than ``below``."""
        if scope is not None:
            scope = validate_scope(scope)
        below = validate_importance(below, "below")
        if now is not None:
            now = validate_time(now, "now")
        if not isinstance(dry_run, bool):
            raise ValidationError("dry_run", "must be True or False")
        if not isinstance(assembly_members, bool):
            raise ValidationError("assembly_members", "must be True or False")
        batch_size = validate_limit(batch_size, "batch_size", MAX_BATCH)
        if scope is None and await self._on_citus():
            return await self._forget_per_tenant(
                below, dry_run, now, assembly_members, batch_size
            )
        params = Params()
        scope_sql = "TRUE" if scope is None else scope_condition(scope, "descendants", params, "m")
        now_sql = f"coalesce({params.add(now)}::timestamptz, now())"
        below_sql = f"{params.add(below)}::float8"
        limit = params.add(batch_size)
        tenant = None if scope is None else scope.tenant
        tenant_sql = q.ALL_TENANTS if scope is None else params.add(scope.tenant)
        report = ForgetReport(dry_run=dry_run)
        if dry_run:
            after = (params.add(_START[0]), params.add(_START[1]))
            sql = q.weak_page(
                self._schema, scope_sql, now_sql, below_sql, limit, assembly_members, after,
                tenant_sql,
            )
            await self._dry_run(sql, params.values, tenant, batch_size, report)
            return report
        sql = q.forget_batch(
            self._schema, scope_sql, now_sql, below_sql, limit, assembly_members, tenant_sql
        )
        while True:

            async def batch() -> builtins.list[uuid.UUID]:
                async with self._transaction(tenant=tenant) as active:
                    return [row["id"] for row in await active.fetch(sql, *params.values)]

            ids = await self._retrying(batch, owns_transaction=True)
            report.batches += 1
            report.forgotten += len(ids)
            report.ids += ids
            if len(ids) < batch_size:
                return report

    async def _dry_run(
        self,
        sql: str,
        values: builtins.list[object],
        tenant: str | None,
        batch_size: int,
        report: ForgetReport,
    ) -> None:
        while True:
            rows = await self._read(
                None, lambda active: active.fetch(sql, *values), tenant=tenant, routed=False
            )
            report.batches += 1
            report.forgotten += len(rows)
            report.ids += [row["id"] for row in rows]
            if len(rows) < batch_size:
                return
            values[-2], values[-1] = rows[-1]["tenant_id"], rows[-1]["id"]

    async def _forget_per_tenant(
        self,
        below: float,
        dry_run: bool,
        now: datetime | None,
        assembly_members: bool,
        batch_size: int,
    ) -> ForgetReport:
        """A pass over every tenant with a policy, one tenant at a time.

        Citus locks rows (``FOR UPDATE``) only in a statement routed to one
        shard, and only tenants with a policy have memories a pass forgets.
        """
        rows = await self._read(
            None,
            lambda active: active.fetch(q.POLICY_TENANTS.format(schema=self._schema)),
            tenant=None,
            routed=False,
        )
        report = ForgetReport(dry_run=dry_run)
        for row in rows:
            part = await self.forget(
                Scope(row["tenant_id"]),
                below=below,
                dry_run=dry_run,
                now=now,
                assembly_members=assembly_members,
                batch_size=batch_size,
            )
            report.forgotten += part.forgotten
            report.ids += part.ids
            report.batches += part.batches
        return report

    async def any_policy(self) -> bool:
        """Whether any half-life policy is set (gc runs a forget pass only then)."""
        found: bool = await self._read(
            None,
            lambda active: active.fetchval(q.ANY_POLICY.format(schema=self._schema)),
            tenant=None,
            routed=False,
        )
        return found

    async def delete_forgotten(self, batch_size: int) -> int:
        """Delete one batch of memories forgotten longer than the grace period (gc)."""
        grace_s = self._settings.forget_grace_days * 86_400.0
        if not await self._on_citus():

            async def batch() -> int:
                async with self._transaction(tenant=None) as active:
                    rows = await active.fetch(q.lock_forgotten(self._schema), grace_s, batch_size)
                    return await self._memories.delete_locked(active, rows)

            return await self._retrying(batch, owns_transaction=True)
        # Citus locks rows only in a statement routed to one shard: find the
        # tenants first (no lock), then lock and delete tenant by tenant.
        tenants = await self._read(
            None,
            lambda active: active.fetch(q.forgotten_tenants(self._schema), grace_s, batch_size),
            tenant=None,
            routed=False,
        )
        sql = q.lock_forgotten(self._schema, tenant_filter=True)
        deleted = 0
        for tenant in [row["tenant_id"] for row in tenants]:

            async def of_tenant(tenant: str = tenant) -> int:
                async with self._transaction(tenant=tenant) as active:
                    rows = await active.fetch(sql, grace_s, batch_size, tenant)
                    return await self._memories.delete_locked(active, rows)

            deleted += await self._retrying(of_tenant, owns_transaction=True)
        return deleted
