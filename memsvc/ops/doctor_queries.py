"""SQL of :mod:`memsvc.ops.doctor`: read-only consistency checks."""

from __future__ import annotations

from memsvc.core.time_limits import EARLIEST_SQL, LATEST_SQL, in_range_sql
from memsvc.db.time_checks import TTL_MINUTES_SQL

PGVECTOR_VERSION = "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
PGVECTOR_AVAILABLE = "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'"


def schema_info(schema: str) -> str:
    """The settings recorded by the first migration."""
    return f"SELECT key, value FROM {schema}.schema_info"


def embedding_column_types() -> str:
    """Declared types of the vector columns (``$1``: schema), e.g. ``vector(384)``."""
    return """
SELECT c.relname AS table_name, a.attname AS column_name,
       format_type(a.atttypid, a.atttypmod) AS type
FROM pg_attribute AS a
JOIN pg_class AS c ON c.oid = a.attrelid
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind = 'r' AND NOT a.attisdropped
  AND (c.relname, a.attname) IN (('memories', 'embedding'), ('assemblies', 'centroid'))
ORDER BY c.relname"""


def indexes() -> str:
    """Every index of the schema (``$1``) with its validity and definition."""
    return """
SELECT c.relname AS name, i.indisvalid AS valid, i.indisready AS ready,
       pg_get_indexdef(c.oid) AS definition
FROM pg_index AS i
JOIN pg_class AS c ON c.oid = i.indexrelid
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = $1
ORDER BY c.relname"""


def assembly_mismatches(schema: str) -> str:
    """Assemblies whose stored counts or centroid differ from their members.

    Recomputed here from scratch: ``count(*)`` of members, ``count`` of
    members with an embedding, and pgvector's ``avg`` of their embeddings,
    compared with the stored centroid by L2 distance (tolerance ``$1``,
    relative to the centroid's norm). At most ``$2`` rows.
    """
    return f"""
WITH actual AS (
    SELECT a.tenant_id, a.id, a.name, a.member_count, a.embedded_count, a.centroid,
           count(am.memory_id) AS members, count(m.embedding) AS embedded,
           avg(m.embedding) AS mean
    FROM {schema}.assemblies AS a
    LEFT JOIN {schema}.assembly_members AS am
      ON am.tenant_id = a.tenant_id AND am.assembly_id = a.id
    LEFT JOIN {schema}.memories AS m ON m.tenant_id = am.tenant_id AND m.id = am.memory_id
    GROUP BY a.tenant_id, a.id
), compared AS (
    SELECT *,
           CASE WHEN centroid IS NULL AND mean IS NULL THEN 0
                WHEN centroid IS NULL OR mean IS NULL THEN 'Infinity'::float8
                ELSE (centroid <-> mean) / greatest(1, sqrt(greatest(0, -(centroid <#> centroid))))
           END AS centroid_error
    FROM actual
)
SELECT tenant_id, id, name, member_count, members, embedded_count, embedded, centroid_error
FROM compared
WHERE member_count <> members OR embedded_count <> embedded OR centroid_error > $1
ORDER BY tenant_id, id
LIMIT $2"""


def orphaned_history(schema: str) -> str:
    """Memories with history but no row and no ``deleted``/``erased`` event (removed by hand)."""
    return f"""
SELECT count(*) FROM (
    SELECT e.tenant_id, e.memory_id FROM {schema}.memory_events AS e
    GROUP BY e.tenant_id, e.memory_id
    HAVING bool_and(e.kind NOT IN ('deleted', 'erased'))
) AS g
WHERE NOT EXISTS (
    SELECT 1 FROM {schema}.memories AS m WHERE m.tenant_id = g.tenant_id AND m.id = g.memory_id
)"""


def memories_without_history(schema: str) -> str:
    """Memories with no event at all (inserted behind memsvc's back).

    ``$1``: with change retention on, the oldest time gc keeps events from
    (NULL otherwise); memories last written before it may have lost theirs.
    """
    return f"""
SELECT count(*) FROM {schema}.memories AS m
WHERE ($1::timestamptz IS NULL OR m.updated_at >= $1::timestamptz)
  AND NOT EXISTS (
    SELECT 1 FROM {schema}.memory_events AS e
    WHERE e.tenant_id = m.tenant_id AND e.memory_id = m.id
)"""


def expired_waiting(schema: str) -> str:
    """Expired memories gc has not deleted yet."""
    return f"SELECT count(*) FROM {schema}.memories WHERE expires_at <= now()"


def sessions_over_retention(schema: str) -> str:
    """Sessions holding more than ``$1`` checkpoints."""
    return f"""
SELECT count(*) FROM (
    SELECT 1 FROM {schema}.session_checkpoints
    GROUP BY tenant_id, project_id, agent_id, session_id
    HAVING count(*) > $1
) AS over"""


def reindex_concurrently(schema: str, name: str) -> str:
    """Rebuild an (invalid) index without blocking its table."""
    return f"REINDEX INDEX CONCURRENTLY {schema}.{name}"


# The fingerprint memsvc stores in content_hash, computed in SQL (sha256 of UTF-8).
_ACTUAL_HASH = "'sha256:' || encode(sha256(convert_to({content}, 'UTF8')), 'hex')"


def stale_content_hashes(schema: str) -> str:
    """Memories whose ``content_hash`` is not the hash of their content (edited in SQL).

    Returns up to ``$1`` rows with the stored and the actual hash, and the
    memory that already holds the actual hash in the same scope (the unique
    content key), if any.
    """
    # The expression where it is used, not a LATERAL subquery computing it
    # once: Citus pushes down no FROM-less subquery calling a function that is
    # not IMMUTABLE (convert_to). The doctor is not on a hot path.
    actual = _ACTUAL_HASH.format(content="m.content")
    return f"""
SELECT m.tenant_id, m.id, m.content_hash AS stored, {actual} AS actual,
       (SELECT o.id FROM {schema}.memories AS o
        WHERE m.key IS NULL AND o.key IS NULL AND o.tenant_id = m.tenant_id
          AND o.project_id IS NOT DISTINCT FROM m.project_id
          AND o.agent_id IS NOT DISTINCT FROM m.agent_id
          AND o.session_id IS NOT DISTINCT FROM m.session_id
          AND o.content_hash = {actual} AND o.id <> m.id
        LIMIT 1) AS clash
FROM {schema}.memories AS m
WHERE m.content_hash <> {actual}
ORDER BY m.tenant_id, m.id
LIMIT $1"""


def fix_content_hash(schema: str) -> str:
    """Store the actual hash of memory ``$1``/``$2`` if its content is still the checked one.

    ``$3`` is the hash found by the check: a content changed since then is
    left for the next run. A clash with another memory of the scope raises
    the unique violation of ``uq_memories_content`` (nothing is changed).
    """
    actual = _ACTUAL_HASH.format(content="content")
    return f"""
UPDATE {schema}.memories SET content_hash = $3
WHERE tenant_id = $1 AND id = $2 AND content_hash <> $3 AND {actual} = $3
RETURNING id"""




def commit_times_waiting(schema: str) -> str:
    """History events whose commit time gc has not persisted yet."""
    return f"SELECT count(*) FROM {schema}.memory_events WHERE committed_at IS NULL"


# ------------------------------------------------------------ time ranges
# Rows from before revision 0024's constraints (or written while one was
# dropped) may hold times Python cannot read: see memsvc.core.time_limits.

_PRIOR_EXPIRY = "(prior->>'expires_at')::timestamptz"


def times_out_of_range(schema: str, table: str, columns: tuple[str, ...]) -> str:
    """For each of a table's time columns, how many rows hold a time out of range (one scan)."""
    counts = ", ".join(
        f"count(*) FILTER (WHERE NOT ({in_range_sql(column)})) AS {column}" for column in columns
    )
    if table == "langgraph_store_items":
        counts += f", count(*) FILTER (WHERE NOT ({TTL_MINUTES_SQL})) AS ttl_minutes"
    if table == "memory_events":
        counts += (
            f", count(*) FILTER (WHERE prior ? 'expires_at' AND "
            f"NOT ({in_range_sql(_PRIOR_EXPIRY)})) AS prior_expires_at"
        )
    return f"SELECT {counts} FROM {schema}.{table}"


def _fixed(column: str, past_means_never: bool) -> tuple[str, str]:
    """(condition true when ``column`` is out of range, the expression replacing it)."""
    if column == "ttl_minutes":
        # Dropped: the item keeps its expiry, reads no longer extend it.
        return f"NOT ({TTL_MINUTES_SQL})", "NULL"
    if column == "prior_expires_at":
        value = _PRIOR_EXPIRY
        bad = f"prior ? 'expires_at' AND NOT ({in_range_sql(value)})"
        fix = (
            f"jsonb_set(prior, '{{expires_at}}', CASE WHEN {value} < {EARLIEST_SQL} "
            f"THEN to_jsonb({EARLIEST_SQL}::timestamptz) ELSE 'null'::jsonb END)"
        )
        return bad, fix
    late = "NULL" if past_means_never else LATEST_SQL
    fix = (
        f"CASE WHEN {column} < {EARLIEST_SQL} THEN {EARLIEST_SQL}::timestamptz "
        f"ELSE {late}::timestamptz END"
    )
    return f"NOT ({in_range_sql(column)})", fix


def bring_times_into_range(schema: str, table: str, columns: dict[str, bool]) -> str:
    """Move a table's out-of-range times to the nearest end of the range, in one statement.

    ``columns`` maps each column found out of range to whether a time past
    the range means "never" (an expiry: ``infinity``, year 33000), which
    becomes NULL. One statement for all of them: a row must satisfy every
    constraint (even one NOT VALID) once updated. ``prior_expires_at`` is
    the prior expiry in history events; ``ttl_minutes`` is dropped.
    """
    fixes = {column: _fixed(column, never) for column, never in columns.items()}
    target = {"prior_expires_at": "prior"}
    assignments = ", ".join(
        f"{target.get(column, column)} = CASE WHEN {bad} THEN {fix} "
        f"ELSE {target.get(column, column)} END"
        for column, (bad, fix) in fixes.items()
    )
    where = " OR ".join(f"({bad})" for bad, _ in fixes.values())
    return f"UPDATE {schema}.{table} SET {assignments} WHERE {where}"


def unvalidated_constraints() -> str:
    """Which of the constraints named ``$2`` are NOT VALID on tables of schema ``$1``."""
    return """
SELECT DISTINCT c.conname AS name, t.relname AS table_name
FROM pg_constraint AS c
JOIN pg_class AS t ON t.oid = c.conrelid
JOIN pg_namespace AS n ON n.oid = t.relnamespace
WHERE n.nspname = $1 AND c.conname = ANY($2::text[]) AND NOT c.convalidated
  AND NOT t.relispartition
ORDER BY 1"""


def validate_constraint(schema: str, table: str, name: str) -> str:
    """Check every row against a NOT VALID constraint (writes go on meanwhile)."""
    return f"ALTER TABLE {schema}.{table} VALIDATE CONSTRAINT {name}"
