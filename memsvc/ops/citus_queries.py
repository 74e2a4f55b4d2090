"""SQL text of :mod:`memsvc.ops.citus`: the Citus distribution script and the status reads.

Identifiers are checked by the caller (the schema is a validated setting,
table names come from the metadata), so they are interpolated as they are.
Each constant is one statement: ``memsvc citus apply`` sends them one at a
time (Citus forwards the whole query text of a ``SET LOCAL`` to the workers,
so it must never share a string with another statement).
"""

from __future__ import annotations

HEADER = """\
-- memsvc: distribute schema {schema} with Citus, every tenant table by tenant_id.
-- Run once on the coordinator as the schema's owner, after `memsvc migrate`
-- (tables may hold rows: Citus copies them into shards), e.g.
-- `psql "$COORDINATOR_URL" -v ON_ERROR_STOP=1 -f citus.sql`, or let
-- `memsvc citus apply` run it. It runs in one transaction: it distributes
-- everything or nothing, and running it again changes nothing.
-- Every tenant table joins the co-location group of {anchor}: a tenant's rows
-- of every table live on one node, so each statement memsvc sends (all of
-- which carry tenant_id) runs on one shard group, and foreign keys hold.
-- Tables are listed parents first (foreign keys need the referenced table
-- distributed before the referencing one).
-- {schema}.alembic_version stays a local table of the coordinator: migrations
-- run there."""

BEGIN = "BEGIN;"

# memsvc's tables carry row triggers (ledgers, change keys), which Citus
# refuses to distribute unless told they are safe: each touches only rows of
# its own row's tenant, which live in co-located shards on the same node.
UNSAFE_TRIGGERS = "SET LOCAL citus.enable_unsafe_triggers = on;"

# Each placement is skipped when the table already has one (idempotent).
REFERENCE_TABLE = """\
-- {comment}
SELECT create_reference_table('{schema}.{table}')
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition
                  WHERE logicalrelid = '{schema}.{table}'::regclass);"""

ANCHOR_TABLE = """\
-- {comment}
SELECT create_distributed_table('{schema}.{table}', 'tenant_id', colocate_with => 'none')
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition
                  WHERE logicalrelid = '{schema}.{table}'::regclass);"""

COLOCATED_TABLE = """\
-- {comment}
SELECT create_distributed_table('{schema}.{table}', 'tenant_id',
                                colocate_with => '{schema}.{anchor}')
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition
                  WHERE logicalrelid = '{schema}.{table}'::regclass);"""

# The values are integers from the settings; '%I' / '%L' quote the rest.
# Citus propagates ALTER DATABASE ... SET from the coordinator to every
# worker (in the same transaction): the supported way to set them there.
SEARCH_SETTINGS = """\
-- Settings on every node. memsvc gives its own connections hnsw.ef_search,
-- hnsw.iterative_scan and hnsw.max_scan_tuples (startup parameters, or SET
-- LOCAL behind pgbouncer); Citus runs each shard's part of a search on a
-- worker connection of its own, which has none of them. Make them this
-- database's defaults on the coordinator and the workers (without iterative
-- scans a filtered search could return a short page), and let SET LOCAL
-- reach the workers: row-level security reads the tenant memsvc sets with it.
DO $$
BEGIN
    EXECUTE format('ALTER DATABASE %I SET hnsw.ef_search = {ef_search}', current_database());
    EXECUTE format('ALTER DATABASE %I SET hnsw.iterative_scan = %L', current_database(),
                   'relaxed_order');
    EXECUTE format('ALTER DATABASE %I SET hnsw.max_scan_tuples = {max_scan_tuples}',
                   current_database());
    EXECUTE format('ALTER DATABASE %I SET citus.propagate_set_commands = %L',
                   current_database(), 'local');
END
$$;"""

COMMIT = "COMMIT;"

# ----------------------------------------------------------------- status reads

CITUS_INSTALLED = "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')"

# On a worker pg_dist_local_group holds the worker's group (> 0).
IS_COORDINATOR = "SELECT groupid = 0 FROM pg_dist_local_group"


def placed_tables(schema: str) -> str:
    """How each table of ``schema`` is placed: type, column, co-location, shards per node."""
    return f"""
SELECT c.relname AS table_name,
       coalesce(t.citus_table_type, 'local') AS placement,
       t.distribution_column, t.colocation_id, t.shard_count,
       coalesce((SELECT jsonb_object_agg(n.node, n.shards) FROM (
            SELECT s.nodename || ':' || s.nodeport AS node, count(*) AS shards
            FROM citus_shards AS s WHERE s.table_name = c.oid::regclass
            GROUP BY 1) AS n), '{{}}'::jsonb)::text AS shards_per_node
FROM pg_class AS c
JOIN pg_namespace AS ns ON ns.oid = c.relnamespace
LEFT JOIN citus_tables AS t ON t.table_name = c.oid::regclass
WHERE ns.nspname = '{schema}' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
ORDER BY c.relname"""


ACTIVE_WORKERS = "SELECT count(*) FROM citus_get_active_worker_nodes()"
