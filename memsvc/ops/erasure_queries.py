"""SQL of :mod:`memsvc.ops.erasure`.

Statement texts depend on the schema name (a validated identifier) and on the
shape of the scope predicate; values are always ``$n`` parameters.
"""

from __future__ import annotations

from memsvc.repositories.scope_sql import Params
from memsvc.scope import Include, Scope


def sql_content_hash(expression: str) -> str:
    """SQL computing memsvc's ``content_hash`` of a text expression."""
    return f"('sha256:' || encode(sha256(convert_to({expression}, 'UTF8')), 'hex'))"


# Where an event (alias ``e``) keeps the scope of its memory: the tenant in its
# column, the other levels in ``prior.scope`` ([tenant, project, agent, session]).
PRIOR_SCOPE = (
    "e.tenant_id",
    "(e.prior -> 'scope' ->> 1)",
    "(e.prior -> 'scope' ->> 2)",
    "(e.prior -> 'scope' ->> 3)",
)


def prior_scope_condition(scope: Scope, include: Include, params: Params) -> str:
    """Events whose ``prior`` says the memory was in ``scope`` (exact or descendants)."""
    upto = 3 if include == "exact" else scope.depth
    conditions = []
    for expression, value in zip(PRIOR_SCOPE[: upto + 1], scope.levels[: upto + 1], strict=True):
        if value is None:
            conditions.append(f"{expression} IS NULL")
        else:
            conditions.append(f"{expression} = {params.add(value)}")
    return " AND ".join(conditions)


# The database's clock: erasure's start, compared with rows' created_at.
NOW = "SELECT clock_timestamp()"


def lock_assemblies_batch(schema: str, scope_sql: str, started: str, limit: str) -> str:
    """Lock the next batch of the scope's assemblies created before the erasure began."""
    return f"""
SELECT tenant_id, id FROM {schema}.assemblies
WHERE {scope_sql} AND created_at <= {started}
ORDER BY tenant_id, id
LIMIT {limit}
FOR UPDATE"""


def delete_assemblies(schema: str) -> str:
    """Delete locked assemblies (tenant/id arrays) and their memberships; returns both counts."""
    return f"""
WITH doomed AS (
    SELECT * FROM unnest($1::text[], $2::uuid[]) AS d(tenant_id, id)
), members AS (
    DELETE FROM {schema}.assembly_members AS am USING doomed AS d
    WHERE am.tenant_id = d.tenant_id AND am.assembly_id = d.id
    RETURNING 1
), gone AS (
    DELETE FROM {schema}.assemblies AS a USING doomed AS d
    WHERE a.tenant_id = d.tenant_id AND a.id = d.id
    RETURNING 1
), ledger AS (
    -- The feed's earlier events of these assemblies; the 'deleted' event the
    -- trigger writes for this statement comes after it and stays, content-free,
    -- like a memory's tombstone, so followers learn the assembly is gone.
    DELETE FROM {schema}.entity_events AS e USING doomed AS d
    WHERE e.tenant_id = d.tenant_id AND e.entity = 'assembly' AND e.entity_id = d.id
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone) AS assemblies, (SELECT count(*) FROM members) AS members,
       (SELECT count(*) FROM ledger) AS entity_events"""


def lock_memories_batch(schema: str, scope_sql: str, started: str, limit: str) -> str:
    """Lock the next batch of the scope's memories created before the erasure began.

    Key order, so erasers never deadlock. ``created_at`` is the writer's
    transaction start, never after its commit: every row committed before
    the erasure began qualifies, and rows written later are not chased (the
    passes end even while writers keep writing).
    """
    return f"""
SELECT tenant_id, id, content_hash, octet_length(content) AS content_bytes
FROM {schema}.memories
WHERE {scope_sql} AND created_at <= {started}
ORDER BY tenant_id, id
LIMIT {limit}
FOR UPDATE"""


def erase_memories(schema: str) -> str:
    """Delete locked memories with their whole history; leave one ``erased`` event each.

    The history DELETE reads the statement's snapshot, so it never sees the
    tombstones this statement inserts. Earlier tombstones of a reused id go
    too: a memory keeps one tombstone, that of its last erasure.
    """
    return f"""
WITH doomed AS (
    SELECT * FROM unnest($1::text[], $2::uuid[]) AS d(tenant_id, id)
), gone AS (
    DELETE FROM {schema}.memories AS m USING doomed AS d
    WHERE m.tenant_id = d.tenant_id AND m.id = d.id
    RETURNING m.tenant_id, m.project_id, m.agent_id, m.session_id, m.id, m.version,
              m.change_key
), history AS (
    DELETE FROM {schema}.memory_events AS e USING doomed AS d
    WHERE e.tenant_id = d.tenant_id AND e.memory_id = d.id
    RETURNING 1
), tombstones AS (
    -- The tombstone keeps the memory's scope and follows its last write in
    -- the change feed (see memsvc.repositories.change_queries).
    INSERT INTO {schema}.memory_events
        (tenant_id, project_id, agent_id, session_id, memory_id, kind, version, change_key)
    SELECT tenant_id, project_id, agent_id, session_id, id, 'erased', version,
           greatest(pg_current_xact_id(), change_key)
    FROM gone
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone) AS memories, (SELECT count(*) FROM history) AS events,
       (SELECT count(*) FROM tombstones) AS tombstones"""


def deleted_memories_batch(schema: str, prior_scope_sql: str, after: str, limit: str) -> str:
    """Ids of deleted memories whose history places them in the scope (no row left).

    In id order after ``after`` (keyset): the walk over the tenant's events
    index resumes where the previous batch stopped instead of starting over.
    """
    return f"""
SELECT DISTINCT e.tenant_id, e.memory_id FROM {schema}.memory_events AS e
WHERE e.memory_id > {after} AND e.prior IS NOT NULL AND e.kind <> 'erased'
  AND {prior_scope_sql}
  AND NOT EXISTS (
    SELECT 1 FROM {schema}.memories AS m WHERE m.tenant_id = e.tenant_id AND m.id = e.memory_id
  )
ORDER BY e.tenant_id, e.memory_id
LIMIT {limit}"""


# Serialises erasers of one deleted memory's history (there is no row to lock).
LOCK_HISTORIES = """
SELECT count(pg_advisory_xact_lock(hashtextextended(k.key, 0)))
FROM (SELECT DISTINCT key FROM unnest($1::text[]) AS u(key) ORDER BY key) AS k"""


def erase_histories(schema: str) -> str:
    """Replace the histories of deleted memories (tenant/id arrays) by one tombstone each.

    Returns the events removed and the hashes and byte lengths of the
    contents their prior values held (for verification). A tombstone is
    added only where none exists, so a second eraser that waited for the
    first adds nothing.
    """
    return f"""
WITH doomed AS (
    SELECT * FROM unnest($1::text[], $2::uuid[]) AS d(tenant_id, id)
    WHERE NOT EXISTS (
        SELECT 1 FROM {schema}.memories AS m WHERE m.tenant_id = d.tenant_id AND m.id = d.id
    )
), history AS (
    DELETE FROM {schema}.memory_events AS e USING doomed AS d
    WHERE e.tenant_id = d.tenant_id AND e.memory_id = d.id AND e.kind <> 'erased'
    RETURNING e.tenant_id, e.project_id, e.agent_id, e.session_id, e.memory_id, e.version,
              e.change_key, e.prior ->> 'content' AS content
), last AS (
    SELECT tenant_id, memory_id, max(version) AS version, max(change_key) AS change_key,
           min(project_id) AS project_id, min(agent_id) AS agent_id,
           min(session_id) AS session_id
    FROM history
    GROUP BY tenant_id, memory_id
), tombstones AS (
    INSERT INTO {schema}.memory_events
        (tenant_id, project_id, agent_id, session_id, memory_id, kind, version, change_key)
    SELECT l.tenant_id, l.project_id, l.agent_id, l.session_id, l.memory_id, 'erased',
           l.version, greatest(pg_current_xact_id(), l.change_key)
    FROM last AS l
    WHERE NOT EXISTS (
        SELECT 1 FROM {schema}.memory_events AS e
        WHERE e.tenant_id = l.tenant_id AND e.memory_id = l.memory_id AND e.kind = 'erased'
    )
    RETURNING 1
)
SELECT (SELECT count(*) FROM history) AS events,
       (SELECT count(*) FROM tombstones) AS tombstones,
       (SELECT coalesce(array_agg(DISTINCT {sql_content_hash("content")}), '{{}}')
        FROM history WHERE content IS NOT NULL) AS hashes,
       (SELECT coalesce(array_agg(DISTINCT octet_length(content)), '{{}}')
        FROM history WHERE content IS NOT NULL) AS lengths"""


def delete_checkpoints_batch(schema: str, scope_sql: str, started: str, limit: str) -> str:
    """Delete the next batch of the scope's session checkpoints and their earlier ledger events."""
    return f"""
WITH gone AS (
    DELETE FROM {schema}.session_checkpoints
    WHERE (tenant_id, id) IN (
        SELECT tenant_id, id FROM {schema}.session_checkpoints
        WHERE {scope_sql} AND created_at <= {started}
        LIMIT {limit}
        FOR UPDATE SKIP LOCKED
    )
    RETURNING tenant_id, id
), ledger AS (
    -- As for assemblies: the trigger's 'deleted' event stays, the rest goes.
    DELETE FROM {schema}.entity_events AS e USING gone AS d
    WHERE e.tenant_id = d.tenant_id AND e.entity = 'checkpoint' AND e.entity_id = d.id
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone) AS checkpoints, (SELECT count(*) FROM ledger) AS entity_events"""


def delete_store_items_batch(schema: str) -> str:
    """Delete the next ``$2`` LangGraph store items of tenant ``$1`` (vectors cascade)."""
    return f"""
WITH doomed AS (
    SELECT tenant_id, prefix, key FROM {schema}.langgraph_store_items
    WHERE tenant_id = $1
    LIMIT $2
    FOR UPDATE
), vectors AS (
    DELETE FROM {schema}.langgraph_store_vectors AS v USING doomed AS d
    WHERE v.tenant_id = d.tenant_id AND v.prefix = d.prefix AND v.key = d.key
    RETURNING 1
), gone AS (
    DELETE FROM {schema}.langgraph_store_items AS i USING doomed AS d
    WHERE i.tenant_id = d.tenant_id AND i.prefix = d.prefix AND i.key = d.key
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone) AS items, (SELECT count(*) FROM vectors) AS vectors"""


# ------------------------------------------------------------------ verification


LANGGRAPH_TABLES = (
    "langgraph_checkpoints",
    "langgraph_checkpoint_blobs",
    "langgraph_checkpoint_writes",
    "langgraph_store_items",
    "langgraph_store_vectors",
    "langgraph_store_namespace_indexes",
)


def remaining(
    schema: str,
    *,
    scope_sql: str,
    prior_scope_sql: str,
    tenant: str,
    tenants: str,
    ids: str,
    started: str,
    whole_tenant: bool,
) -> str:
    """Rows of the erased scope still present, per table: each count must be 0.

    ``tenant`` is the tenant's placeholder; ``tenants``/``ids`` those of the
    arrays of erased memory ids, whose history must be a bare tombstone;
    ``started`` the erasure's start (rows created after it are counted by
    :func:`written_during`, not here).
    """
    langgraph = ""
    if whole_tenant:
        langgraph = "".join(
            f",\n       (SELECT count(*) FROM {schema}.{table}"
            f" WHERE tenant_id = {tenant}) AS {table}"
            for table in LANGGRAPH_TABLES
        )
    erased = f"unnest({tenants}::text[], {ids}::uuid[]) AS d(tenant_id, id)"
    return f"""
SELECT (SELECT count(*) FROM {schema}.memories
        WHERE {scope_sql} AND created_at <= {started}) AS memories,
       (SELECT count(*) FROM {schema}.assemblies
        WHERE {scope_sql} AND created_at <= {started}) AS assemblies,
       (SELECT count(*) FROM {schema}.session_checkpoints
        WHERE {scope_sql} AND created_at <= {started}) AS session_checkpoints,
       (SELECT count(*) FROM {schema}.memory_events AS e
        WHERE e.kind <> 'erased' AND {prior_scope_sql}) AS memory_events,
       (SELECT count(*) FROM {schema}.memory_events AS e
        JOIN {erased} ON e.tenant_id = d.tenant_id AND e.memory_id = d.id
        WHERE e.kind <> 'erased' OR e.prior IS NOT NULL) AS erased_history,
       (SELECT count(*) FROM {schema}.entity_events
        WHERE {scope_sql} AND kind <> 'deleted' AND at <= {started}) AS entity_events,
       (SELECT count(*) FROM {schema}.assembly_members AS am
        JOIN {erased} ON am.tenant_id = d.tenant_id AND am.memory_id = d.id)
           AS assembly_members{langgraph}"""


def written_during(schema: str, scope_sql: str, started: str) -> str:
    """Rows of the scope created after the erasure began (kept, whole), per table."""
    return f"""
SELECT (SELECT count(*) FROM {schema}.memories
        WHERE {scope_sql} AND created_at > {started}) AS memories,
       (SELECT count(*) FROM {schema}.assemblies
        WHERE {scope_sql} AND created_at > {started}) AS assemblies,
       (SELECT count(*) FROM {schema}.session_checkpoints
        WHERE {scope_sql} AND created_at > {started}) AS session_checkpoints"""


TEXT_COLUMNS = """
SELECT c.table_name, c.column_name, c.data_type,
       EXISTS (
           SELECT 1 FROM information_schema.columns AS t
           WHERE t.table_schema = c.table_schema AND t.table_name = c.table_name
             AND t.column_name = 'tenant_id'
       ) AS has_tenant
FROM information_schema.columns AS c
JOIN information_schema.tables AS tb
  ON tb.table_schema = c.table_schema AND tb.table_name = c.table_name
WHERE c.table_schema = $1 AND tb.table_type = 'BASE TABLE'
  AND c.data_type IN ('text', 'character varying', 'jsonb', 'json')
ORDER BY c.table_name, c.ordinal_position"""


def quote_ident(name: str) -> str:
    """A catalog name as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def content_matches(schema: str, table: str, columns: list[tuple[str, str]], tenant: bool) -> str:
    """Per column of one table: rows holding an erased content, in one scan of the table.

    A text value matches when it equals an erased content, a JSON value when
    any string inside it does (at any depth). Parameters: ``$1`` the content
    hashes, ``$2`` their byte lengths (compared first: most values are
    dismissed without hashing), ``$3`` the tenant (when the table has one).
    """
    counts = []
    for name, data_type in columns:
        col = f"t.{quote_ident(name)}"
        if data_type in ("jsonb", "json"):
            value = "v.value #>> '{}'"
            condition = f"""EXISTS (
        SELECT 1 FROM jsonb_path_query({col}::jsonb, 'strict $.**') AS v(value)
        WHERE jsonb_typeof(v.value) = 'string'
          AND octet_length({value}) = ANY($2::int[])
          AND {sql_content_hash(value)} = ANY($1::text[]))"""
        else:
            condition = (
                f"octet_length({col}) = ANY($2::int[]) "
                f"AND {sql_content_hash(col)} = ANY($1::text[])"
            )
        counts.append(f"count(*) FILTER (WHERE {condition}) AS {quote_ident(name)}")
    where = "WHERE t.tenant_id = $3" if tenant else ""
    return f"""
SELECT {", ".join(counts)}
FROM {schema}.{quote_ident(table)} AS t
{where}"""


def held_elsewhere(schema: str) -> str:
    """Which of the hashes ``$1`` live memories of tenant ``$2`` still hold (outside the scope)."""
    return f"""
SELECT DISTINCT content_hash FROM {schema}.memories
WHERE tenant_id = $2 AND content_hash = ANY($1::text[])"""

