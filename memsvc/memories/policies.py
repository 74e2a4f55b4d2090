"""Half-life policies (``svc.policies``): how fast the memories of a tenant or scope fade.

One policy per exact scope, stored in ``memory_policies``; a memory follows
the most specific policy on its scope's path (its session's, else its
agent's, its project's, its tenant's). Its strength decays with that
half-life (see :mod:`memsvc.memories.strength`): ``rank="recall"`` weighs
it, and forget passes (``svc.maintenance.forget``, ``memsvc gc``) forget the
memories whose strength fell below a floor. A scope under no policy is never
forgotten.
"""

from __future__ import annotations

import builtins
from datetime import timedelta

import asyncpg

from memsvc.core.errors import NotFoundError
from memsvc.core.ids import new_id
from memsvc.core.models import Policy
from memsvc.core.scope import Scope
from memsvc.core.time_limits import validate_duration
from memsvc.core.validation import validate_scope, validate_tenant
from memsvc.db.repository import Repository
from memsvc.memories import policy_queries as q
from memsvc.telemetry import traced_operations


def _levels(scope: Scope) -> list[object]:
    return [scope.tenant, scope.project, scope.agent, scope.session]


@traced_operations("memsvc.policies")
class PolicyRepository(Repository):
    """Set, read, list and remove half-life policies (``svc.policies``)."""

    async def set(
        self,
        scope: Scope,
        *,
        half_life: float | timedelta,
        conn: asyncpg.Connection | None = None,
    ) -> Policy:
        """Give ``scope`` (and the scopes under it without a policy of their own) a half-life.

        Args:
            scope: A tenant (``Scope("acme")``) or any narrower scope.
            half_life: Seconds, or a timedelta; positive.
            conn: A connection (and transaction) of your own to run on.
        """
        scope = validate_scope(scope)
        seconds = validate_duration(half_life, "half_life")
        args = [*_levels(scope), new_id(), seconds]

        async def attempt() -> Policy:
            async with self._connection(conn, tenant=scope.tenant) as active:
                return Policy.from_row(await active.fetchrow(q.upsert(self._schema), *args))

        return await self._retrying(attempt, owns_transaction=conn is None)

    async def get(self, scope: Scope, *, conn: asyncpg.Connection | None = None) -> Policy:
        """The policy set on exactly ``scope`` (NotFoundError if none)."""
        scope = validate_scope(scope)
        sql = q.select_exact(self._schema)
        row = await self._read(
            conn, lambda active: active.fetchrow(sql, *_levels(scope)), tenant=scope.tenant
        )
        if row is None:
            raise NotFoundError(f"no policy on {scope}")
        return Policy.from_row(row)

    async def list(
        self, *, tenant: str | None = None, conn: asyncpg.Connection | None = None
    ) -> builtins.list[Policy]:
        """Every policy (of ``tenant``), tenant first, broader scopes before narrower ones."""
        tenant = validate_tenant(tenant)
        sql = q.list_policies(self._schema, tenant is not None)
        args = [] if tenant is None else [tenant]
        rows = await self._read(conn, lambda active: active.fetch(sql, *args), tenant=tenant)
        return [Policy.from_row(row) for row in rows]

    async def delete(self, scope: Scope, *, conn: asyncpg.Connection | None = None) -> bool:
        """Remove the policy set on exactly ``scope``; False if there was none.

        Its memories then follow the next policy up their path, or none.
        """
        scope = validate_scope(scope)
        sql = q.delete_exact(self._schema)

        async def attempt() -> bool:
            async with self._connection(conn, tenant=scope.tenant) as active:
                return await active.fetchrow(sql, *_levels(scope)) is not None

        return await self._retrying(attempt, owns_transaction=conn is None)

    async def half_lives(
        self, tenant: str, conn: asyncpg.Connection | None = None
    ) -> dict[Scope, float]:
        """The tenant's half-lives in seconds, by exact scope (for ranking)."""
        sql = q.list_policies(self._schema, True)
        rows = await self._read(conn, lambda active: active.fetch(sql, tenant), tenant=tenant)
        return {Policy.from_row(row).scope: row["half_life_s"] for row in rows}
