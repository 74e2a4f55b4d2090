"""SQL of :mod:`memsvc.ops.stats`.

Each function returns one statement's text for a schema name (a validated
identifier); values are ``$n`` parameters. With ``one_tenant`` the
statement reads the tenant ``$1`` only (on Citus: one shard); without it,
every tenant.
"""

from __future__ import annotations

# The deepest level a row is scoped to (levels may be skipped).
LEVEL = """CASE WHEN session_id IS NOT NULL THEN 'session'
            WHEN agent_id IS NOT NULL THEN 'agent'
            WHEN project_id IS NOT NULL THEN 'project'
            ELSE 'tenant' END"""


def _tenant(one_tenant: bool) -> str:
    return "tenant_id = $1" if one_tenant else "true"


def memories_per_tenant(schema: str, one_tenant: bool) -> str:
    """Memories per tenant: by scope level, expired waiting for gc, with embedding."""
    return f"""
SELECT tenant_id,
       count(*) AS total,
       count(*) FILTER (WHERE {LEVEL} = 'tenant') AS tenant_only,
       count(*) FILTER (WHERE {LEVEL} = 'project') AS project,
       count(*) FILTER (WHERE {LEVEL} = 'agent') AS agent,
       count(*) FILTER (WHERE {LEVEL} = 'session') AS session,
       count(*) FILTER (WHERE expires_at <= now()) AS expired,
       count(embedding) AS embedded,
       count(key) AS keyed
FROM {schema}.memories
WHERE {_tenant(one_tenant)}
GROUP BY tenant_id
ORDER BY tenant_id"""


def assemblies_per_tenant(schema: str, one_tenant: bool) -> str:
    """Assemblies and memberships per tenant."""
    return f"""
SELECT tenant_id, count(*) AS assemblies, coalesce(sum(member_count), 0)::bigint AS members
FROM {schema}.assemblies
WHERE {_tenant(one_tenant)}
GROUP BY tenant_id"""


def checkpoints_per_tenant(schema: str, one_tenant: bool) -> str:
    """Checkpoints per tenant: count, bytes, sessions holding them."""
    return f"""
SELECT tenant_id, count(*) AS checkpoints,
       coalesce(sum(size_bytes), 0)::bigint AS bytes,
       count(DISTINCT (project_id, agent_id, session_id)) AS sessions
FROM {schema}.session_checkpoints
WHERE {_tenant(one_tenant)}
GROUP BY tenant_id"""


def store_items_per_tenant(schema: str, one_tenant: bool) -> str:
    """LangGraph store items per tenant, and how many expired waiting for gc."""
    return f"""
SELECT tenant_id, count(*) AS items, count(*) FILTER (WHERE expires_at <= now()) AS expired
FROM {schema}.langgraph_store_items
WHERE {_tenant(one_tenant)}
GROUP BY tenant_id"""


def relation_sizes() -> str:
    """Size of every table and index of a schema (``$1``: the schema name).

    ``reltuples`` is the planner's row estimate (-1 before the first
    ANALYZE): free to read, unlike ``count(*)``.
    """
    return """
SELECT c.relname AS name,
       CASE WHEN c.relkind IN ('r', 'p') THEN 'table' ELSE 'index' END AS kind,
       coalesce(t.relname, c.relname) AS table_name,
       CASE WHEN c.relkind IN ('p', 'I') THEN leaves.bytes ELSE pg_relation_size(c.oid) END
           AS bytes,
       CASE c.relkind WHEN 'r' THEN pg_total_relation_size(c.oid)
                      WHEN 'p' THEN leaves.total_bytes END AS total_bytes,
       CASE c.relkind WHEN 'r' THEN pg_indexes_size(c.oid)
                      WHEN 'p' THEN leaves.index_bytes END AS index_bytes,
       CASE WHEN c.relkind IN ('p', 'I') THEN leaves.estimated_rows
            ELSE c.reltuples::bigint END AS estimated_rows
FROM pg_class AS c
JOIN pg_namespace AS n ON n.oid = c.relnamespace
LEFT JOIN pg_index AS i ON i.indexrelid = c.oid
LEFT JOIN pg_class AS t ON t.oid = i.indrelid
-- A partitioned table or index (tenant partitioning) stores nothing itself:
-- its figures are the sums over its partitions, which are listed too.
LEFT JOIN LATERAL (
    SELECT sum(pg_relation_size(tree.relid))::bigint AS bytes,
           sum(pg_total_relation_size(tree.relid))::bigint AS total_bytes,
           sum(pg_indexes_size(tree.relid))::bigint AS index_bytes,
           sum(greatest(leaf.reltuples, 0))::bigint AS estimated_rows
    FROM pg_partition_tree(c.oid) AS tree JOIN pg_class AS leaf ON leaf.oid = tree.relid
    WHERE tree.isleaf
) AS leaves ON c.relkind IN ('p', 'I')
WHERE n.nspname = $1 AND c.relkind IN ('r', 'i', 'p', 'I')
ORDER BY coalesce(t.relname, c.relname), c.relkind DESC, c.relname"""
