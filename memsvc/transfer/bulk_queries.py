"""SQL of :mod:`memsvc.transfer.bulk`: index state, definition, drop and build.

``DROP/CREATE INDEX CONCURRENTLY`` cannot run inside a transaction block,
so these statements run one by one on a connection in autocommit.
"""

from __future__ import annotations

# The session advisory lock a bulk load holds while the vector index is
# dropped: two bulk loads never rebuild at once, doctor --repair leaves a
# missing index alone, and gc builds no scope index meanwhile.
from memsvc.db.index_ddl import BULK_LOCK_KEY as BULK_LOCK_KEY
from memsvc.db.index_ddl import NO_TIMEOUTS, build_memory


def count_up_to(schema: str, table: str) -> str:
    """Rows of a table, counted up to ``$1`` (cheap on large tables)."""
    return f"SELECT count(*) FROM (SELECT 1 FROM {schema}.{table} LIMIT $1) AS capped"


def count_new(schema: str) -> str:
    """How many of the (tenant, id) pairs in ``$1``/``$2`` are not stored memories."""
    return f"""
SELECT count(*) FROM unnest($1::text[], $2::uuid[]) AS i(tenant_id, id)
WHERE NOT EXISTS (
    SELECT 1 FROM {schema}.memories AS m WHERE m.tenant_id = i.tenant_id AND m.id = i.id)"""


def index_state() -> str:
    """An index's validity, definition and whether it is a partitioned table's: $1 schema,
    $2 index name."""
    return """
SELECT i.indisvalid AS valid, i.indisready AS ready, pg_get_indexdef(c.oid) AS definition,
       c.relkind = 'I' AS partitioned
FROM pg_class AS c
JOIN pg_namespace AS n ON n.oid = c.relnamespace
JOIN pg_index AS i ON i.indexrelid = c.oid
WHERE n.nspname = $1 AND c.relname = $2"""


def drop_index_concurrently(schema: str, name: str) -> str:
    """Drop an index without blocking readers or writers of its table."""
    return f"DROP INDEX CONCURRENTLY IF EXISTS {schema}.{name}"


def drop_partitioned_index(schema: str, name: str) -> str:
    """Drop a partitioned table's index (and its partitions' indexes).

    PostgreSQL refuses ``DROP INDEX CONCURRENTLY`` there: this one takes a
    short exclusive lock on the table and its partitions.
    """
    return f"DROP INDEX IF EXISTS {schema}.{name}"


def is_partitioned() -> str:
    """Whether the table ``$1`` (qualified name) is partitioned."""
    return "SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass($1)"


def partitions_of() -> str:
    """The partitions of the table ``$1`` (qualified name), qualified, in name order."""
    return """
SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname) AS name, c.relname AS relname
FROM pg_inherits AS i
JOIN pg_class AS c ON c.oid = i.inhrelid
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE i.inhparent = to_regclass($1)
ORDER BY length(c.relname), c.relname"""


def attach_index(schema: str, parent: str, child: str) -> str:
    """Attach a partition's index to the partitioned index (nothing if it already is)."""
    return f"ALTER INDEX {schema}.{parent} ATTACH PARTITION {schema}.{child}"


def build_settings(maintenance_work_mem_mb: int) -> str:
    """Session settings for an index build on a connection of our own.

    No statement or lock timeout: once the index is dropped, giving up the
    rebuild half-way would leave searches on exact scans.
    """
    return f"{build_memory(maintenance_work_mem_mb)}; {NO_TIMEOUTS}"


# Whether the server is on this machine (a Unix-socket connection has no
# server address), and how many workers a maintenance command may use.
BUILD_WORKERS = """
SELECT inet_server_addr() IS NULL AS local,
       current_setting('max_parallel_maintenance_workers')::int AS workers"""


def limit_build_workers(workers: int) -> str:
    """Use at most ``workers`` parallel workers (besides the leader) for the build."""
    return f"SET max_parallel_maintenance_workers = {int(workers)}"


TRY_LOCK = "SELECT pg_try_advisory_lock($1)"
UNLOCK = "SELECT pg_advisory_unlock($1)"


def invalid_indexes() -> str:
    """Indexes of the schema ``$1`` named in ``$2`` that are invalid and not being built.

    An index being built right now (``CREATE INDEX CONCURRENTLY`` by any
    session) is invalid until it is done: ``building`` tells it apart from
    one an interrupted build left behind.
    """
    return """
SELECT c.relname AS name, pg_get_indexdef(c.oid) AS definition,
       EXISTS (SELECT 1 FROM pg_stat_progress_create_index AS p
               WHERE p.index_relid = c.oid) AS building
FROM pg_index AS i
JOIN pg_class AS c ON c.oid = i.indexrelid
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = ANY($2::text[]) AND NOT i.indisvalid
ORDER BY c.relname"""


def missing_indexes() -> str:
    """Which of the index names ``$2`` do not exist in the schema ``$1``."""
    return """
SELECT name FROM unnest($2::text[]) AS name
WHERE NOT EXISTS (
    SELECT 1 FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
    WHERE n.nspname = $1 AND c.relname = name AND c.relkind IN ('i', 'I'))
ORDER BY name"""
