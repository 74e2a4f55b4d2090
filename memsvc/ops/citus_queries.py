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
