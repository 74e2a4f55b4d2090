"""SQL of :mod:`memsvc.transfer.export`: every row of a scope (or of everything), in key order.

``filter_sql`` is a scope predicate from :mod:`memsvc.db.sql`
(values bound as parameters) or ``true``.
"""

from __future__ import annotations

from memsvc.checkpoints.queries import SUMMARY_COLUMNS
from memsvc.memories.queries import MEMORY_COLUMNS

ASSEMBLY_EXPORT_COLUMNS = (
    "tenant_id, project_id, agent_id, session_id, id, name, description, metadata, "
    "member_count, version, created_at, updated_at"
)


def memories(schema: str, filter_sql: str) -> str:
    """Memories (expired ones included: they are exported as they are)."""
    return f"""
SELECT {MEMORY_COLUMNS} FROM {schema}.memories
WHERE {filter_sql}
ORDER BY tenant_id, id"""


def assemblies(schema: str, filter_sql: str) -> str:
    """Assemblies with their member ids."""
    return f"""
SELECT {ASSEMBLY_EXPORT_COLUMNS},
       ARRAY(SELECT am.memory_id FROM {schema}.assembly_members AS am
             WHERE am.tenant_id = a.tenant_id AND am.assembly_id = a.id
             ORDER BY am.memory_id) AS member_ids
FROM {schema}.assemblies AS a
WHERE {filter_sql}
ORDER BY tenant_id, id"""


def checkpoints(schema: str, filter_sql: str) -> str:
    """Checkpoints, oldest first per session, data as JSON text (spliced into lines as is)."""
    return f"""
SELECT {SUMMARY_COLUMNS}, data::text AS data FROM {schema}.session_checkpoints
WHERE {filter_sql}
ORDER BY tenant_id, project_id, agent_id, session_id, created_at, id"""


def store_items(schema: str, tenant_sql: str) -> str:
    """LangGraph store items with their vectors as a JSON object (field -> array) in text.

    ``tenant_sql`` selects the tenants (store items belong to a tenant, not a
    deeper scope); expired items are exported as they are.
    """
    return f"""
SELECT i.tenant_id, i.prefix, i.key, i.value, i.created_at, i.updated_at, i.expires_at,
       i.ttl_minutes,
       coalesce((SELECT json_object_agg(v.field, v.embedding::text::json ORDER BY v.field)
                 FROM {schema}.langgraph_store_vectors AS v
                 WHERE v.tenant_id = i.tenant_id AND v.prefix = i.prefix AND v.key = i.key),
                '{{}}'::json)::text AS vectors
FROM {schema}.langgraph_store_items AS i
WHERE {tenant_sql}
ORDER BY i.tenant_id, i.prefix, i.key"""


def count_rows(schema: str, filter_sql: str, tenant_sql: str) -> str:
    """How many rows an export will write (for progress bars)."""
    return f"""
SELECT (SELECT count(*) FROM {schema}.memories WHERE {filter_sql})
     + (SELECT count(*) FROM {schema}.assemblies WHERE {filter_sql})
     + (SELECT count(*) FROM {schema}.session_checkpoints WHERE {filter_sql})
     + (SELECT count(*) FROM {schema}.langgraph_store_items AS i WHERE {tenant_sql})"""
