"""DDL of tenant partitioning (see :mod:`memsvc.db.partitions`), run by the migrations."""

from __future__ import annotations

from memsvc.db.partitions import PARTITIONED_TABLES, SETTING_KEY, partition_name


def create_partitions(schema: str, table: str, count: int) -> list[str]:
    """DDL creating (and commenting) the ``count`` hash partitions of ``table``."""
    statements = []
    for remainder in range(count):
        name = partition_name(table, remainder)
        statements.append(
            f"CREATE TABLE {schema}.{name} PARTITION OF {schema}.{table} "
            f"FOR VALUES WITH (MODULUS {count}, REMAINDER {remainder})"
        )
        statements.append(
            f"COMMENT ON TABLE {schema}.{name} IS 'Partition {remainder} of {count} of "
            f"{table}: the tenants whose tenant_id hashes to {remainder} modulo {count}.'"
        )
    return statements


def record_partitions(schema: str) -> str:
    """Record in ``schema_info`` how many partitions ``memories`` has (0: none).

    Read from the catalog, so databases created before the setting existed
    record 0, and it renders as offline SQL too.
    """
    return f"""
INSERT INTO {schema}.schema_info (key, value)
SELECT '{SETTING_KEY}', count(*)::text FROM pg_inherits
WHERE inhparent = '{schema}.memories'::regclass
ON CONFLICT (key) DO NOTHING"""


_POLICY = (
    "USING (tenant_id = current_setting(''memsvc.tenant'', true)) "
    "WITH CHECK (tenant_id = current_setting(''memsvc.tenant'', true))"
)


def secure_partitions(schema: str) -> str:
    """Give every partition of ``memories`` the parent's tenant policy and RLS state.

    A policy on the parent binds queries through it; the partitions are
    tables of their own that a role granted the whole schema could read
    directly, so they carry the same policy, enabled and forced when the
    parent's is.
    """
    parent = f"'{schema}.memories'::regclass"
    return f"""
DO $$
DECLARE
    part regclass;
    parent_rls boolean;
    parent_forced boolean;
BEGIN
    SELECT relrowsecurity, relforcerowsecurity INTO parent_rls, parent_forced
    FROM pg_class WHERE oid = {parent};
    FOR part IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = {parent} LOOP
        EXECUTE format('CREATE POLICY tenant_isolation ON %s {_POLICY}', part);
        IF parent_rls THEN
            EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', part);
        END IF;
        IF parent_forced THEN
            EXECUTE format('ALTER TABLE %s FORCE ROW LEVEL SECURITY', part);
        END IF;
    END LOOP;
END $$"""


def unsecure_partitions(schema: str) -> str:
    """Undo :func:`secure_partitions`."""
    parent = f"'{schema}.memories'::regclass"
    return f"""
DO $$
DECLARE
    part regclass;
BEGIN
    FOR part IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = {parent} LOOP
        EXECUTE format('ALTER TABLE %s NO FORCE ROW LEVEL SECURITY', part);
        EXECUTE format('ALTER TABLE %s DISABLE ROW LEVEL SECURITY', part);
        EXECUTE format('DROP POLICY IF EXISTS tenant_isolation ON %s', part);
    END LOOP;
END $$"""


def name_partition_indexes(schema: str) -> str:
    """Rename the partitions' indexes after their parent index: ``<parent index>_p<n>``.

    PostgreSQL names them after the partition and columns; the parent's
    name with the partition's suffix lets plans, doctor and index builds
    (see :func:`memsvc.transfer.bulk.build_index`) tell which index serves what.
    """
    return f"""
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT child.oid::regclass AS child,
               parent.relname || '_' || substring(part.relname FROM '_(p[0-9]+)$') AS wanted
        FROM pg_inherits AS inh
        JOIN pg_class AS child ON child.oid = inh.inhrelid
        JOIN pg_class AS parent ON parent.oid = inh.inhparent
        JOIN pg_index AS x ON x.indexrelid = child.oid
        JOIN pg_class AS part ON part.oid = x.indrelid
        WHERE parent.relkind = 'I' AND parent.relnamespace = '{schema}'::regnamespace
          AND part.relname ~ '^({"|".join(PARTITIONED_TABLES)})_p[0-9]+$'
          AND child.relname <> parent.relname || '_' || substring(part.relname FROM '_(p[0-9]+)$')
    LOOP
        EXECUTE format('ALTER INDEX %s RENAME TO %I', r.child, r.wanted);
    END LOOP;
END $$"""
