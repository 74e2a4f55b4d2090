"""SQL text of :mod:`memsvc.ops.citus`: the Citus distribution script.

Identifiers are checked by the caller (the schema is a validated setting,
table names come from the metadata), so they are interpolated as they are.
"""

from __future__ import annotations

HEADER = """\
-- memsvc: distribute schema {schema} with Citus, every tenant table by tenant_id.
-- Run once on the coordinator as the schema's owner, after `memsvc migrate`
-- (tables may hold rows: Citus copies them into shards), e.g.
-- `psql "$COORDINATOR_URL" -v ON_ERROR_STOP=1 -f citus.sql`.
-- Every tenant table joins the co-location group of {anchor}: a tenant's rows
-- of every table live on one node, so each statement memsvc sends (all of
-- which carry tenant_id) runs on one shard group, and foreign keys hold.
-- Tables are listed parents first (foreign keys need the referenced table
-- distributed before the referencing one).
-- {schema}.alembic_version stays a local table of the coordinator: migrations
-- run there.
"""

REFERENCE_TABLE = """\
-- {comment}
SELECT create_reference_table('{schema}.{table}');
"""

ANCHOR_TABLE = """\
-- {comment}
SELECT create_distributed_table('{schema}.{table}', 'tenant_id', colocate_with => 'none');
"""

COLOCATED_TABLE = """\
-- {comment}
SELECT create_distributed_table('{schema}.{table}', 'tenant_id',
                                colocate_with => '{schema}.{anchor}');
"""

# The values are integers from the settings; '%I' / '%L' quote the rest.
SEARCH_SETTINGS = """\
-- Search settings on every node. memsvc gives its own connections
-- hnsw.ef_search, hnsw.iterative_scan and hnsw.max_scan_tuples (startup
-- parameters, or SET LOCAL behind pgbouncer); Citus runs each shard's part of
-- a search on a worker connection of its own, which has none of them. Make
-- them this database's defaults on the coordinator and the workers (without
-- iterative scans a filtered search could return a short page), and let SET
-- LOCAL reach the workers.
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
$$;
SELECT run_command_on_workers(
    format('ALTER DATABASE %I SET hnsw.ef_search = {ef_search}', current_database()));
SELECT run_command_on_workers(
    format('ALTER DATABASE %I SET hnsw.iterative_scan = %L', current_database(),
           'relaxed_order'));
SELECT run_command_on_workers(
    format('ALTER DATABASE %I SET hnsw.max_scan_tuples = {max_scan_tuples}',
           current_database()));
"""
