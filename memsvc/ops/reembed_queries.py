"""SQL of :mod:`memsvc.ops.reembed` (online embedding-model migration).

The second column, its trigger and its index are DDL run by ``memsvc
reembed`` itself, not by a migration: their type depends on the new model's
dimension, known only when the migration starts.
"""

from __future__ import annotations

from memsvc.db.partition_queries import name_partition_indexes
from memsvc.db.sql import quote_literal
from memsvc.memories.embedding_space_queries import NEXT_COLUMN, NEXT_INDEX

# Transaction-scoped advisory lock serialising the start and the switch of
# migrations; session-scoped, it keeps two workers from building the index
# at once (the second waits, then finds it built).
REEMBED_LOCK_KEY = 0x6D656D737663_0E  # "memsvc" + 0x0e
LOCK = "SELECT pg_advisory_xact_lock($1)"

RESET_FUNCTION = "memories_embedding_next_reset"
RESET_TRIGGER = "memories_embedding_next_reset"
MEMORY_VECTOR_INDEX = "ix_memories_embedding_hnsw"


def running(schema: str) -> str:
    """The migration in progress, if any."""
    return f"""
SELECT id, embedder, dim, started_at, switched_at,
       extract(epoch FROM now() - started_at)::float8 AS age_s
FROM {schema}.embedding_migrations WHERE switched_at IS NULL ORDER BY id LIMIT 1"""


def state(schema: str) -> str:
    """A migration (``$1``) and its age in seconds, by the server's clock."""
    return f"""
SELECT switched_at, extract(epoch FROM now() - started_at)::float8 AS age_s
FROM {schema}.embedding_migrations WHERE id = $1"""


def sees_only_one_tenant(schema: str) -> str:
    """Whether row-level security would hide other tenants' memories from this role."""
    return f"""
SELECT c.relrowsecurity AND c.relforcerowsecurity AND NOT (r.rolsuper OR r.rolbypassrls)
FROM pg_class AS c, pg_roles AS r
WHERE c.oid = '{schema}.memories'::regclass AND r.rolname = current_user"""


def recorded_dim(schema: str) -> str:
    """The embedding dimension recorded in ``schema_info``."""
    return f"SELECT value FROM {schema}.schema_info WHERE key = 'embedding_dim'"


def set_lock_timeout(timeout: str) -> str:
    """Bound the switch's waits for locks (for its transaction only)."""
    return f"SET LOCAL lock_timeout = '{timeout}'"


def lock_memories(schema: str) -> str:
    """Nobody reads or writes memories during the (short) switch."""
    return f"LOCK TABLE {schema}.memories IN ACCESS EXCLUSIVE MODE"


def drop_view(schema: str, name: str) -> str:
    """Drop a view that reads the old column (recreated right after)."""
    return f'DROP VIEW {schema}."{name}"'


def recreate_view(
    schema: str,
    name: str,
    definition: str,
    comment: str | None,
    column_comments: list[str],
    grants: list[str],
) -> list[str]:
    """Create a view again as it was, with its comments and grants."""
    view = f'{schema}."{name}"'
    statements = [f"CREATE VIEW {view} AS {definition}"]
    if comment is not None:
        statements.append(f"COMMENT ON VIEW {view} IS {quote_literal(comment)}")
    for entry in column_comments:
        column, _, text = entry.partition("=")
        statements.append(f'COMMENT ON COLUMN {view}."{column}" IS {quote_literal(text)}')
    for grant in grants:
        grantee, _, privilege = grant.rpartition(" ")
        statements.append(f"GRANT {privilege} ON {view} TO {grantee}")
    return statements


def by_id(schema: str) -> str:
    """A migration (``$1``), locked: the switch updates it, and holders of it wait."""
    return f"""
SELECT id, embedder, dim, started_at, switched_at,
       extract(epoch FROM now() - started_at)::float8 AS age_s
FROM {schema}.embedding_migrations WHERE id = $1 FOR UPDATE"""


def start(schema: str) -> str:
    """Record a new migration (``$1`` spec, ``$2`` dimension)."""
    return f"""
INSERT INTO {schema}.embedding_migrations (embedder, dim) VALUES ($1, $2)
RETURNING id, embedder, dim, started_at, switched_at, 0::float8 AS age_s"""


def add_column(schema: str, column_type: str) -> str:
    """The second embedding column (instant: no default, no rewrite).

    Its vectors stay in their rows, as ``embedding``'s do (migration 0034):
    the column becomes ``embedding`` at the switch.
    """
    return (
        f"ALTER TABLE {schema}.memories ADD COLUMN IF NOT EXISTS {NEXT_COLUMN} {column_type};"
        f" ALTER TABLE {schema}.memories ALTER COLUMN {NEXT_COLUMN} SET STORAGE MAIN"
    )


def next_column_type(schema: str) -> str:
    """The declared type of the second column (``vector(256)``), or no row."""
    return f"""
SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute AS a
WHERE a.attrelid = '{schema}.memories'::regclass AND a.attname = '{NEXT_COLUMN}'
  AND NOT a.attisdropped"""


def reset_function(schema: str) -> str:
    """Clear the new embedding of a row whose content or old embedding changes.

    Writers that know of the migration set it again in the same
    transaction; for the others, the workers (or the switch) embed it.
    """
    return f"""
CREATE OR REPLACE FUNCTION {schema}.{RESET_FUNCTION}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.content IS DISTINCT FROM OLD.content
       OR NEW.embedding IS DISTINCT FROM OLD.embedding THEN
        NEW.{NEXT_COLUMN} := NULL;
    END IF;
    RETURN NEW;
END
$$"""


def reset_trigger(schema: str) -> str:
    """Run :func:`reset_function` on updates of content or embedding."""
    return f"""
CREATE OR REPLACE TRIGGER {RESET_TRIGGER}
BEFORE UPDATE OF content, embedding ON {schema}.memories
FOR EACH ROW EXECUTE FUNCTION {schema}.{RESET_FUNCTION}()"""


def claim_batch(schema: str) -> str:
    """Lock the next rows still lacking the new embedding, after ``($2, $3)`` in key order.

    ``SKIP LOCKED``: rows another worker holds are left to it, so workers
    share the table without waiting for each other.
    """
    return f"""
SELECT tenant_id, id, content FROM {schema}.memories
WHERE {NEXT_COLUMN} IS NULL AND embedding IS NOT NULL AND (tenant_id, id) > ($2, $3)
ORDER BY tenant_id, id
LIMIT $1
FOR UPDATE SKIP LOCKED"""


def claim_all(schema: str) -> str:
    """At the switch (table locked): the next rows still lacking the new embedding."""
    return f"""
SELECT tenant_id, id, content FROM {schema}.memories
WHERE {NEXT_COLUMN} IS NULL AND embedding IS NOT NULL
ORDER BY tenant_id, id
LIMIT $1"""


def fill(schema: str, vector_type: str) -> str:
    """Store new embeddings (``$1..$3``: tenant, id, vector arrays)."""
    return f"""
UPDATE {schema}.memories AS m SET {NEXT_COLUMN} = f.vector
FROM unnest($1::text[], $2::uuid[], $3::{vector_type}[]) AS f(tenant_id, id, vector)
WHERE m.tenant_id = f.tenant_id AND m.id = f.id"""


def progress(schema: str) -> str:
    """Rows with an old embedding, and how many of them still lack the new one."""
    return f"""
SELECT count(*) FILTER (WHERE embedding IS NOT NULL) AS total,
       count(*) FILTER (WHERE embedding IS NOT NULL AND {NEXT_COLUMN} IS NULL) AS remaining
FROM {schema}.memories"""


def next_index(schema: str, opclass: str, m: int, ef_construction: int) -> str:
    """The new column's HNSW index (built ``CONCURRENTLY`` by the caller)."""
    return (
        f"CREATE INDEX {NEXT_INDEX} ON {schema}.memories USING hnsw ({NEXT_COLUMN} {opclass}) "
        f"WITH (m = {int(m)}, ef_construction = {int(ef_construction)})"
    )


def dependent_views(schema: str) -> str:
    """Views that read ``memories.embedding``, with what recreating them needs."""
    return f"""
SELECT DISTINCT v.oid, v.relname, pg_get_viewdef(v.oid) AS definition,
       obj_description(v.oid, 'pg_class') AS comment,
       ARRAY(SELECT a.attname || '=' || d.description
             FROM pg_attribute a JOIN pg_description d
               ON d.objoid = v.oid AND d.classoid = 'pg_class'::regclass
              AND d.objsubid = a.attnum
             WHERE a.attrelid = v.oid ORDER BY a.attnum) AS column_comments,
       ARRAY(SELECT CASE WHEN acl.grantee = 0 THEN 'PUBLIC'
                         ELSE acl.grantee::regrole::text END
                    || ' ' || acl.privilege_type
             FROM aclexplode(v.relacl) AS acl
             WHERE acl.grantee <> v.relowner) AS grants
FROM pg_depend AS dep
JOIN pg_rewrite AS r ON r.oid = dep.objid
JOIN pg_class AS v ON v.oid = r.ev_class
JOIN pg_attribute AS col
  ON col.attrelid = dep.refobjid AND col.attnum = dep.refobjsubid
WHERE dep.refobjid = '{schema}.memories'::regclass AND col.attname = 'embedding'
  AND v.oid <> dep.refobjid"""


def switch_columns(schema: str) -> list[str]:
    """The new column takes the old one's place (the old one, and its index, go)."""
    return [
        f"DROP TRIGGER IF EXISTS {RESET_TRIGGER} ON {schema}.memories",
        f"DROP FUNCTION IF EXISTS {schema}.{RESET_FUNCTION}()",
        f"ALTER TABLE {schema}.memories DROP COLUMN embedding",
        f"ALTER TABLE {schema}.memories RENAME COLUMN {NEXT_COLUMN} TO embedding",
        f"ALTER INDEX {schema}.{NEXT_INDEX} RENAME TO {MEMORY_VECTOR_INDEX}",
        # Partitioned memories: each partition's index follows the new name.
        name_partition_indexes(schema),
        f"COMMENT ON COLUMN {schema}.memories.embedding IS 'Embedding of the content.'",
    ]


def switch_centroids(schema: str, column_type: str) -> str:
    """Assembly centroids are in the embedding space: retype them, then recompute."""
    return f"ALTER TABLE {schema}.assemblies ALTER COLUMN centroid TYPE {column_type} USING NULL"


def store_vectors(schema: str) -> str:
    """Whether the LangGraph store holds any vector (its column shares the dimension)."""
    return f"SELECT EXISTS (SELECT 1 FROM {schema}.langgraph_store_vectors)"


def switch_store_vectors(
    schema: str, column_type: str, bits_expression: str, dim: int, index_sql: list[str]
) -> list[str]:
    """Retype the (empty) LangGraph store vector column to the new dimension.

    Its sign bits are a generated column of the embedding (PostgreSQL cannot
    retype a column one depends on): they are dropped with their covering
    index and declared again at the new dimension; ``index_sql`` then builds
    the HNSW and covering indexes as the schema metadata declares them.
    """
    table = f"{schema}.langgraph_store_vectors"
    return [
        f"DROP INDEX IF EXISTS {schema}.ix_langgraph_store_vectors_embedding_hnsw",
        f"DROP INDEX IF EXISTS {schema}.ix_langgraph_store_vectors_namespace_bits",
        f"ALTER TABLE {table} DROP COLUMN IF EXISTS embedding_bits",
        f"ALTER TABLE {table} ALTER COLUMN embedding TYPE {column_type}",
        f"ALTER TABLE {table} ADD COLUMN embedding_bits bit({int(dim)}) "
        f"GENERATED ALWAYS AS ({bits_expression}) STORED",
        f"COMMENT ON COLUMN {table}.embedding_bits IS "
        "'Sign bits of the embedding, kept by the database (quantized search).'",
        *index_sql,
    ]


def record_dim(schema: str) -> str:
    """The recorded embedding dimension (``$1``) changes at the switch, not before."""
    return f"UPDATE {schema}.schema_info SET value = $1 WHERE key = 'embedding_dim'"


def mark_switched(schema: str) -> str:
    """The migration (``$1``) is done."""
    return f"UPDATE {schema}.embedding_migrations SET switched_at = now() WHERE id = $1"


def last_switched(schema: str) -> str:
    """The newest finished migration."""
    return f"""
SELECT id, embedder, dim, started_at, switched_at FROM {schema}.embedding_migrations
WHERE switched_at IS NOT NULL ORDER BY id DESC LIMIT 1"""
