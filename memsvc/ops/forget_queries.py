"""SQL of forget passes (:mod:`memsvc.ops.forget`) and of gc's deletion of forgotten memories."""

from __future__ import annotations

from memsvc.db.sql import INSERT_ARM_RETURNING
from memsvc.memories.forgetting_queries import FORGETTING_PRIOR
from memsvc.memories.policy_queries import half_life_of
from memsvc.memories.queries import (
    EVENT_SCOPE,
    MEMORY_COLUMNS,
    NEXT_CHANGE_KEY,
    qualified,
)
from memsvc.memories.strength import strength_sql

# The ``tenant`` of a pass over every tenant: each row's own.
ALL_TENANTS = "m.tenant_id"


def _weak(
    schema: str,
    scope_sql: str,
    now: str,
    below: str,
    members: bool,
    after: tuple[str, str] | None,
    tenant: str,
) -> str:
    """Rows of ``memories AS m`` a pass may forget, in id order: under a policy,
    not keyed, pinned, expired or forgotten already, not in an assembly unless
    ``members``, and weaker than ``below`` at ``now``. ``tenant``: the rows'
    tenant in the other tables' conditions (``m.tenant_id``, or the value of
    a pass over one tenant, which Citus routes to the tenant's shard)."""
    member_filter = (
        ""
        if members
        else f"""
  AND NOT EXISTS (SELECT 1 FROM {schema}.assembly_members AS am
                  WHERE am.tenant_id = {tenant} AND am.memory_id = m.id)"""
    )
    resume = f"\n  AND (m.tenant_id, m.id) > ({after[0]}::text, {after[1]}::uuid)" if after else ""
    return f"""
SELECT {qualified(MEMORY_COLUMNS, "m")}, m.change_key FROM {schema}.memories AS m
WHERE {scope_sql} AND m.key IS NULL AND NOT m.pinned AND m.forgotten_at IS NULL
  AND (m.expires_at IS NULL OR m.expires_at > now())
  AND EXISTS (SELECT 1 FROM {schema}.memory_policies AS p
              WHERE p.tenant_id = {tenant}){member_filter}{resume}
  AND {strength_sql(now, half_life_of(schema, "m", tenant))} < {below}
ORDER BY m.tenant_id, m.id"""


def forget_batch(
    schema: str, scope_sql: str, now: str, below: str, limit: str, members: bool, tenant: str
) -> str:
    """Forget the next batch of weak memories (see :func:`_weak`); returns their ids.

    Rows are locked ``FOR UPDATE SKIP LOCKED``, and the lock re-checks the
    conditions on the row's latest version: a memory accessed, restored,
    pinned or reinforced meanwhile is strong again and is left alone.
    ``now`` only reckons strength: ``forgotten_at`` is the real time of the
    pass, from which the grace period of restore and gc runs.
    """
    return f"""
WITH old AS ({_weak(schema, scope_sql, now, below, members, None, tenant)}
    LIMIT {limit}
    FOR UPDATE OF m SKIP LOCKED
), upd AS (
    UPDATE {schema}.memories AS m
    SET forgotten_at = now(), version = m.version + 1, updated_at = now(),
        change_key = {NEXT_CHANGE_KEY.format(row="m")}
    FROM old
    WHERE m.tenant_id = {"old.tenant_id" if tenant == ALL_TENANTS else tenant} AND m.id = old.id
    RETURNING m.tenant_id, m.id, m.version
), ev AS (
    INSERT INTO {schema}.memory_events
        ({EVENT_SCOPE}, memory_id, kind, version, prior, change_key)
    SELECT {qualified(EVENT_SCOPE, "old")}, old.id, 'updated', upd.version, {FORGETTING_PRIOR},
           {NEXT_CHANGE_KEY.format(row="old")}
    FROM upd JOIN old ON old.tenant_id = upd.tenant_id AND old.id = upd.id
    {INSERT_ARM_RETURNING}
)
SELECT tenant_id, id FROM upd ORDER BY tenant_id, id"""


def weak_page(
    schema: str,
    scope_sql: str,
    now: str,
    below: str,
    limit: str,
    members: bool,
    after: tuple[str, str],
    tenant: str,
) -> str:
    """A dry run's page: the weak memories after ``after`` (tenant, id placeholders), unlocked."""
    return f"""
SELECT w.tenant_id, w.id FROM ({_weak(schema, scope_sql, now, below, members, after, tenant)}
    LIMIT {limit}) AS w"""


def lock_forgotten(schema: str, tenant_filter: bool = False) -> str:
    """Lock a batch of memories forgotten more than ``$1`` seconds ago, to delete them.

    ``tenant_filter``: of tenant ``$3`` only (Citus locks rows only in a
    statement routed to one shard). Never a pinned one (pinning restores
    a memory; the check guards rows written otherwise).
    """
    tenant = "AND tenant_id = $3" if tenant_filter else ""
    return f"""
SELECT tenant_id, id FROM {schema}.memories
WHERE forgotten_at IS NOT NULL AND forgotten_at <= now() - $1::float8 * interval '1 second'
  AND NOT pinned {tenant}
ORDER BY tenant_id, id
LIMIT $2
FOR UPDATE SKIP LOCKED"""


def forgotten_tenants(schema: str) -> str:
    """Up to ``$2`` tenants with memories forgotten more than ``$1`` seconds ago (no lock)."""
    return f"""
SELECT DISTINCT tenant_id FROM {schema}.memories
WHERE forgotten_at IS NOT NULL AND forgotten_at <= now() - $1::float8 * interval '1 second'
LIMIT $2"""


POLICY_TENANTS = "SELECT DISTINCT tenant_id FROM {schema}.memory_policies ORDER BY tenant_id"


ANY_POLICY = "SELECT EXISTS (SELECT 1 FROM {schema}.memory_policies)"
