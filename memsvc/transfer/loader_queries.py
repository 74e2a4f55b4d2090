"""SQL of :mod:`memsvc.transfer.loader`: staging, idempotent inserts, conflict diagnosis.

Memories are copied (binary COPY) into a temporary staging table, then
inserted with ``ON CONFLICT DO NOTHING``: a row whose id, content (in its
scope) or key is already taken is skipped, never duplicated, which is what
makes an import safe to run twice. Each inserted memory gets its
``created`` history event in the same statement.

Batches are first copied (binary COPY) straight into ``memories``, with their
events copied in the same transaction: no staging round trip. Into a table
that held rows when the load began, a batch any of whose ids is stored
already is staged instead. Any error (a duplicate in the input, say) rolls that
batch back and it goes through the staging path instead.
"""

from __future__ import annotations

from memsvc.db.sql import INSERT_ARM_RETURNING
from memsvc.memories.queries import MEMORY_COLUMN_NAMES, MEMORY_COLUMNS

STAGING = "memsvc_import_memories"

# A staged row: its place in the batch, then a memory's columns.
STAGING_COLUMNS = ("ord", *MEMORY_COLUMN_NAMES)


# The columns of a direct COPY into memories, in the order the loader writes them.
DIRECT_COLUMNS = MEMORY_COLUMN_NAMES
# Events carry the memory's scope: erasure and the change feed select history by it.
EVENT_COLUMNS = (
    "tenant_id", "project_id", "agent_id", "session_id", "memory_id", "kind", "version"
)

NOW = "SELECT now()"


def direct_copy_possible(schema: str) -> str:
    """Whether batches may be copied straight into memories, and whether it is empty.

    Not with row-level security in force for this role: COPY FROM refuses
    tables whose policies apply. ``empty``: nothing stored an import could
    collide with but its own duplicates, so batches need no id check.
    """
    return f"""
SELECT NOT row_security_active('{schema}.memories')
       AND NOT row_security_active('{schema}.memory_events') AS possible,
       NOT EXISTS (SELECT 1 FROM {schema}.memories) AS empty"""


def unknown_to_the_planner(schema: str) -> str:
    """Whether the planner's statistics of memory_events count fewer than ``$1`` rows.

    Never analyzed (-1) or analyzed nearly empty, every generic plan on it
    costs alike, and the one the history trigger caches for the load's
    session reads the tenant's whole history for each event it writes
    (``memory_id`` filtered, not searched).
    """
    return f"SELECT reltuples < $1 FROM pg_class WHERE oid = '{schema}.memory_events'::regclass"


def analyze(schema: str) -> str:
    """Statistics for the tables a load writes (the plans cached on them are made again)."""
    return f"ANALYZE {schema}.memories, {schema}.memory_events"


def any_stored(schema: str) -> str:
    """Whether any of the memories ``$1`` (tenants) / ``$2`` (ids) is stored already."""
    return f"""
SELECT EXISTS (
    SELECT 1 FROM unnest($1::text[], $2::uuid[]) AS b(tenant_id, id)
    JOIN {schema}.memories AS m ON m.tenant_id = b.tenant_id AND m.id = b.id)"""


# Before the session's first temporary table: a batch of staged rows fits in
# local buffers instead of being written out and read back.
STAGING_SESSION = "SET temp_buffers = '256MB'"


def create_staging(vector_schema: str, vector_type: str, dim: int) -> str:
    """A session-private staging table, emptied at every commit.

    Filled by binary COPY, which the loader's connection can do for every
    column (jsonb included: see ``register_binary_jsonb``).
    """
    return f"""
CREATE TEMP TABLE IF NOT EXISTS {STAGING} (
    ord int NOT NULL,
    tenant_id text, project_id text, agent_id text, session_id text,
    id uuid, key text, content text, content_hash text, metadata jsonb,
    embedding {vector_schema}.{vector_type}({dim}),
    importance real, version int,
    created_at timestamptz, updated_at timestamptz, expires_at timestamptz,
    access_count bigint, last_accessed_at timestamptz,
    valid_from timestamptz, valid_to timestamptz, supersedes uuid[], superseded_by uuid,
    pinned bool, forgotten_at timestamptz,
    reinforced_count int, last_reinforced_at timestamptz, content_unique bool
) ON COMMIT DELETE ROWS"""


def insert_staged(schema: str) -> str:
    """Insert the staged memories that take no existing id, content or key; with events.

    Returns the staging ``ord`` of every row inserted.
    """
    return f"""
WITH ins AS (
    INSERT INTO {schema}.memories AS m ({MEMORY_COLUMNS})
    SELECT tenant_id, project_id, agent_id, session_id, id, key, content, content_hash,
           metadata, embedding,
           importance, version,
           coalesce(created_at, now()), coalesce(updated_at, created_at, now()), expires_at,
           access_count, last_accessed_at, valid_from, valid_to, supersedes, superseded_by,
           pinned, forgotten_at, reinforced_count, last_reinforced_at, content_unique
    FROM {STAGING}
    ON CONFLICT DO NOTHING
    RETURNING m.tenant_id, m.project_id, m.agent_id, m.session_id, m.id, m.version
), ev AS (
    INSERT INTO {schema}.memory_events
        (tenant_id, project_id, agent_id, session_id, memory_id, kind, version)
    SELECT tenant_id, project_id, agent_id, session_id, id, 'created', version FROM ins
    {INSERT_ARM_RETURNING}
)
-- Two staged rows with one id: the first (staged, hence inserted, first) went in.
SELECT DISTINCT ON (s.tenant_id, s.id) s.ord
FROM {STAGING} AS s JOIN ins ON ins.tenant_id = s.tenant_id AND ins.id = s.id
ORDER BY s.tenant_id, s.id, s.ord"""


def diagnose_skipped(schema: str) -> str:
    """Why staged rows (``$1``: their ords) were not inserted.

    ``same`` is true when the stored row with this id is this very memory
    (an earlier import): not a problem. Otherwise ``id_owner``,
    ``content_owner`` or ``key_owner`` names the memory in the way.
    """
    return f"""
SELECT s.ord,
       m.id AS id_owner,
       (m.id IS NOT NULL AND m.content_hash = s.content_hash
        AND m.key IS NOT DISTINCT FROM s.key
        AND m.project_id IS NOT DISTINCT FROM s.project_id
        AND m.agent_id IS NOT DISTINCT FROM s.agent_id
        AND m.session_id IS NOT DISTINCT FROM s.session_id) AS same,
       c.id AS content_owner,
       k.id AS key_owner
FROM {STAGING} AS s
LEFT JOIN {schema}.memories AS m ON m.tenant_id = s.tenant_id AND m.id = s.id
LEFT JOIN LATERAL (
    SELECT o.id FROM {schema}.memories AS o
    WHERE m.id IS NULL AND s.key IS NULL AND o.tenant_id = s.tenant_id
      AND o.content_hash = s.content_hash AND o.key IS NULL
      AND o.project_id IS NOT DISTINCT FROM s.project_id
      AND o.agent_id IS NOT DISTINCT FROM s.agent_id
      AND o.session_id IS NOT DISTINCT FROM s.session_id
    LIMIT 1
) AS c ON true
LEFT JOIN LATERAL (
    SELECT o.id FROM {schema}.memories AS o
    WHERE m.id IS NULL AND s.key IS NOT NULL AND o.tenant_id = s.tenant_id
      AND o.key = s.key
      AND o.project_id IS NOT DISTINCT FROM s.project_id
      AND o.agent_id IS NOT DISTINCT FROM s.agent_id
      AND o.session_id IS NOT DISTINCT FROM s.session_id
    LIMIT 1
) AS k ON true
WHERE s.ord = ANY($1::int[])"""


def insert_assembly(schema: str) -> str:
    """Insert an assembly with no members yet (aggregates follow); nothing on conflict.

    Parameters: $1-$4 scope, $5 id, $6 name, $7 description, $8 metadata,
    $9 version, $10 created_at, $11 updated_at.
    """
    return f"""
INSERT INTO {schema}.assemblies
    (tenant_id, project_id, agent_id, session_id, id, name, description, metadata,
     version, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9,
        coalesce($10::timestamptz, now()), coalesce($11::timestamptz, $10::timestamptz, now()))
ON CONFLICT DO NOTHING
RETURNING id"""


def existing_assembly(schema: str) -> str:
    """The stored assembly with an id, or the one holding the name in the scope."""
    return f"""
SELECT id, name, project_id, agent_id, session_id FROM {schema}.assemblies
WHERE tenant_id = $1 AND (id = $2 OR (name = $3
      AND project_id IS NOT DISTINCT FROM $4::text AND agent_id IS NOT DISTINCT FROM $5::text
      AND session_id IS NOT DISTINCT FROM $6::text))
ORDER BY id = $2 DESC
LIMIT 1"""


def lock_member_memories(schema: str) -> str:
    """Scopes of would-be members, locked FOR KEY SHARE (they cannot vanish meanwhile)."""
    return f"""
SELECT id, project_id, agent_id, session_id FROM {schema}.memories
WHERE tenant_id = $1 AND id = ANY($2::uuid[])
ORDER BY tenant_id, id
FOR KEY SHARE"""


def insert_members(schema: str) -> str:
    """Add members to an assembly this import just created."""
    return f"""
INSERT INTO {schema}.assembly_members (tenant_id, assembly_id, memory_id)
SELECT $1, $2, m.id FROM unnest($3::uuid[]) AS m(id)
ON CONFLICT DO NOTHING"""


def restore_assembly_version(schema: str) -> str:
    """Put back the exported version and updated_at after the aggregates were computed."""
    return f"""
UPDATE {schema}.assemblies
SET version = $3, updated_at = coalesce($4::timestamptz, updated_at)
WHERE tenant_id = $1 AND id = $2"""


def insert_checkpoints(schema: str) -> str:
    """Insert checkpoints from parallel arrays; existing ids are skipped. Returns inserted ids."""
    return f"""
INSERT INTO {schema}.session_checkpoints
    (tenant_id, project_id, agent_id, session_id, id, description, data, size_bytes, created_at)
SELECT tenant_id, project_id, agent_id, session_id, id, description, data::jsonb,
       octet_length(data), coalesce(created_at, clock_timestamp())
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::uuid[], $6::text[],
            $7::text[], $8::timestamptz[])
     AS c(tenant_id, project_id, agent_id, session_id, id, description, data, created_at)
ON CONFLICT DO NOTHING
RETURNING id"""


def insert_store_items(schema: str) -> str:
    """Insert LangGraph store items from parallel arrays; existing ones are skipped.

    Returns the (prefix, key) of the items inserted.
    """
    return f"""
INSERT INTO {schema}.langgraph_store_items AS i
    (tenant_id, prefix, key, value, created_at, updated_at, expires_at, ttl_minutes)
SELECT $1, p, k, v::jsonb, coalesce(c, now()), coalesce(u, coalesce(c, now())), e, t
FROM unnest($2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[],
            $7::timestamptz[], $8::float8[]) AS s(p, k, v, c, u, e, t)
ON CONFLICT DO NOTHING
RETURNING i.prefix, i.key"""


def insert_store_vectors(schema: str, vector_type: str) -> str:
    """Insert the vectors of store items ($1 tenant, then parallel arrays)."""
    return f"""
INSERT INTO {schema}.langgraph_store_vectors (tenant_id, prefix, key, field, embedding)
SELECT $1, p, k, f, e
FROM unnest($2::text[], $3::text[], $4::text[], $5::{vector_type}[]) AS s(p, k, f, e)"""
