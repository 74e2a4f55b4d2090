"""SQL of :class:`memsvc.memories.policies.PolicyRepository` (``memory_policies``)."""

from __future__ import annotations

COLUMNS = "tenant_id, project_id, agent_id, session_id, half_life_s, updated_at"

# The exact scope of a policy: ``$1``-``$4``, NULL levels equal to NULL.
EXACT_SCOPE = (
    "tenant_id = $1 AND project_id IS NOT DISTINCT FROM $2 "
    "AND agent_id IS NOT DISTINCT FROM $3 AND session_id IS NOT DISTINCT FROM $4"
)


def upsert(schema: str) -> str:
    """Set the half-life (``$6``, seconds) of the scope ``$1``-``$4``; ``$5`` a new id."""
    return f"""
INSERT INTO {schema}.memory_policies AS p
    (tenant_id, project_id, agent_id, session_id, id, half_life_s, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, now())
ON CONFLICT (tenant_id, project_id, agent_id, session_id)
-- EXCLUDED's time, not now(): Citus takes no volatile call in DO UPDATE SET.
DO UPDATE SET half_life_s = EXCLUDED.half_life_s, updated_at = EXCLUDED.updated_at
RETURNING {COLUMNS}"""


def select_exact(schema: str) -> str:
    """The policy set on exactly the scope ``$1``-``$4``."""
    return f"SELECT {COLUMNS} FROM {schema}.memory_policies WHERE {EXACT_SCOPE}"


def delete_exact(schema: str) -> str:
    """Remove the policy of exactly the scope ``$1``-``$4``; returns its row."""
    return f"DELETE FROM {schema}.memory_policies WHERE {EXACT_SCOPE} RETURNING {COLUMNS}"


def list_policies(schema: str, tenant_filter: bool) -> str:
    """Every policy (of tenant ``$1``), in scope order."""
    where = "WHERE tenant_id = $1" if tenant_filter else ""
    return f"""
SELECT {COLUMNS} FROM {schema}.memory_policies {where}
ORDER BY tenant_id, project_id NULLS FIRST, agent_id NULLS FIRST, session_id NULLS FIRST"""


def applicable(policy: str, memory: str, tenant: str | None = None) -> str:
    """Whether the policy row ``policy`` applies to the memory row ``memory``.

    It does when its scope is on the memory's path: equal to the memory's
    scope cut below its own deepest level (see :meth:`memsvc.Scope.ancestors`).
    ``tenant``: the memory's tenant as a value, when the statement names one
    (Citus routes a statement to one shard only when every table read is
    filtered by the tenant's value).
    """
    p, m = policy, memory
    return (
        f"{p}.tenant_id = {tenant or m + '.tenant_id'}"
        f" AND ({p}.project_id IS NOT DISTINCT FROM {m}.project_id"
        f" OR ({p}.project_id IS NULL AND {p}.agent_id IS NULL AND {p}.session_id IS NULL))"
        f" AND ({p}.agent_id IS NOT DISTINCT FROM {m}.agent_id"
        f" OR ({p}.agent_id IS NULL AND {p}.session_id IS NULL))"
        f" AND ({p}.session_id IS NOT DISTINCT FROM {m}.session_id OR {p}.session_id IS NULL)"
    )


def half_life_of(schema: str, memory: str, tenant: str | None = None) -> str:
    """A scalar subquery: the half-life (seconds) of the most specific policy on
    the memory row ``memory``'s path, NULL when none applies (``tenant``: see
    :func:`applicable`)."""
    return f"""(
    SELECT p.half_life_s FROM {schema}.memory_policies AS p
    WHERE {applicable("p", memory, tenant)}
    ORDER BY (p.session_id IS NOT NULL) DESC, (p.agent_id IS NOT NULL) DESC,
             (p.project_id IS NOT NULL) DESC
    LIMIT 1)"""
