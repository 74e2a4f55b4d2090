"""Change keys assigned where the row is written; ledger rows of assemblies and checkpoints by row.

For Citus (issue 31), and the same on one server:

- ``assign_change_key()``, a BEFORE trigger on the five keyed tables, sets
  ``change_key`` to ``greatest(pg_current_xact_id(), NEW.change_key)``: the
  writing transaction's id on the node that holds the row (on Citus, a
  statement's functions and column defaults are evaluated on the coordinator,
  whose transaction ids are another node's). Statements now pass only the
  previous write's key (or nothing: the column default becomes the constant
  1), and the trigger raises it, which is what they computed themselves
  before. An update that lowers a memory's key (a new change-feed epoch,
  revision 0023) is left alone.
- The ledger triggers of assemblies and session checkpoints (0011) were
  statement triggers reading transition tables, which Citus cannot run on a
  shard (``executor could not find named tuplestore``); they become row
  triggers writing the same events (an update's only when the version
  changed, as the statement trigger's join did).

On a Citus cluster the DDL reaches every shard; triggers on distributed
tables need ``citus.enable_unsafe_triggers`` (each trigger touches only rows
of its own row's tenant, in co-located shards).

Revision ID: 0031
Revises: 0030
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from memsvc.db.migrate import settings_for_migration
from memsvc.db.tables import CURRENT_XID, FIRST_CHANGE_KEY

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Tables whose rows take a key when inserted; memories also when updated.
KEYED_TABLES = ("memories", "memory_events", "assemblies", "session_checkpoints", "entity_events")
SCOPE = "tenant_id, project_id, agent_id, session_id"
ENTITIES = (("assemblies", "assembly", "version"), ("session_checkpoints", "checkpoint", "1"))


def _allow_triggers_on_citus() -> None:
    op.execute("""
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        SET LOCAL citus.enable_unsafe_triggers = on;
    END IF;
END $$""")


def upgrade() -> None:
    schema = settings_for_migration().db_schema
    _allow_triggers_on_citus()
    op.execute(f"""
CREATE FUNCTION {schema}.assign_change_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.change_key < OLD.change_key THEN
        RETURN NEW;  -- lowered on purpose: a new change-feed epoch
    END IF;
    NEW.change_key := greatest(pg_current_xact_id(), NEW.change_key);
    RETURN NEW;
END $$""")
    for table in KEYED_TABLES:
        events = "INSERT OR UPDATE OF change_key" if table == "memories" else "INSERT"
        op.execute(f"""
CREATE TRIGGER assign_change_key BEFORE {events} ON {schema}.{table}
FOR EACH ROW EXECUTE FUNCTION {schema}.assign_change_key()""")
        op.execute(
            f"ALTER TABLE {schema}.{table} ALTER COLUMN change_key SET DEFAULT {FIRST_CHANGE_KEY}"
        )
    for table, entity, version in ENTITIES:
        _row_ledger_triggers(schema, table, entity, version)


def _row_ledger_triggers(schema: str, table: str, entity: str, version: str) -> None:
    for kind in ("created", "deleted"):
        op.execute(f"DROP TRIGGER record_{kind} ON {schema}.{table}")
        op.execute(f"DROP FUNCTION {schema}.record_{entity}_{kind}()")
    op.execute(f"""
CREATE FUNCTION {schema}.record_{entity}_created() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.entity_events ({SCOPE}, entity, entity_id, kind, version, change_key)
    VALUES (NEW.tenant_id, NEW.project_id, NEW.agent_id, NEW.session_id, '{entity}', NEW.id,
            'created', {version.replace("version", "NEW.version")}, NEW.change_key);
    RETURN NULL;
END $$""")
    op.execute(f"""
CREATE FUNCTION {schema}.record_{entity}_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.entity_events ({SCOPE}, entity, entity_id, kind, version, change_key)
    VALUES (OLD.tenant_id, OLD.project_id, OLD.agent_id, OLD.session_id, '{entity}', OLD.id,
            'deleted', {version.replace("version", "OLD.version")}, OLD.change_key);
    RETURN NULL;
END $$""")
    op.execute(f"""
CREATE TRIGGER record_created AFTER INSERT ON {schema}.{table}
FOR EACH ROW EXECUTE FUNCTION {schema}.record_{entity}_created()""")
    op.execute(f"""
CREATE TRIGGER record_deleted AFTER DELETE ON {schema}.{table}
FOR EACH ROW EXECUTE FUNCTION {schema}.record_{entity}_deleted()""")
    if entity != "assembly":
        return
    op.execute(f"DROP TRIGGER record_updated ON {schema}.{table}")
    op.execute(f"""
CREATE OR REPLACE FUNCTION {schema}.record_assembly_updated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.entity_events ({SCOPE}, entity, entity_id, kind, version, change_key)
    VALUES (NEW.tenant_id, NEW.project_id, NEW.agent_id, NEW.session_id, 'assembly', NEW.id,
            'updated', NEW.version, NEW.change_key);
    RETURN NULL;
END $$""")
    op.execute(f"""
CREATE TRIGGER record_updated AFTER UPDATE ON {schema}.{table}
FOR EACH ROW WHEN (OLD.version IS DISTINCT FROM NEW.version)
EXECUTE FUNCTION {schema}.record_assembly_updated()""")


def downgrade() -> None:
    schema = settings_for_migration().db_schema
    _allow_triggers_on_citus()
    for table in KEYED_TABLES:
        op.execute(f"DROP TRIGGER assign_change_key ON {schema}.{table}")
        op.execute(
            f"ALTER TABLE {schema}.{table} ALTER COLUMN change_key SET DEFAULT {CURRENT_XID}"
        )
    op.execute(f"DROP FUNCTION {schema}.assign_change_key()")
    for table, entity, version in ENTITIES:
        for kind in ("created", "deleted"):
            op.execute(f"DROP TRIGGER record_{kind} ON {schema}.{table}")
            op.execute(f"DROP FUNCTION {schema}.record_{entity}_{kind}()")
        _statement_ledger_triggers(schema, table, entity, version)
    op.execute(f"DROP TRIGGER record_updated ON {schema}.assemblies")
    op.execute(f"""
CREATE OR REPLACE FUNCTION {schema}.record_assembly_updated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.entity_events ({SCOPE}, entity, entity_id, kind, version, change_key)
    SELECT n.tenant_id, n.project_id, n.agent_id, n.session_id, 'assembly', n.id, 'updated',
           n.version, n.change_key
    FROM new_rows AS n JOIN old_rows AS o ON o.tenant_id = n.tenant_id AND o.id = n.id
    WHERE n.version <> o.version;
    RETURN NULL;
END $$""")
    op.execute(f"""
CREATE TRIGGER record_updated AFTER UPDATE ON {schema}.assemblies
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION {schema}.record_assembly_updated()""")


def _statement_ledger_triggers(schema: str, table: str, entity: str, version: str) -> None:
    """0011's statement triggers, put back."""
    op.execute(f"""
CREATE FUNCTION {schema}.record_{entity}_created() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.entity_events ({SCOPE}, entity, entity_id, kind, version, change_key)
    SELECT {SCOPE}, '{entity}', id, 'created', {version}, change_key FROM new_rows;
    RETURN NULL;
END $$""")
    op.execute(f"""
CREATE FUNCTION {schema}.record_{entity}_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.entity_events ({SCOPE}, entity, entity_id, kind, version, change_key)
    SELECT {SCOPE}, '{entity}', id, 'deleted', {version},
           greatest(pg_current_xact_id(), change_key)
    FROM old_rows;
    RETURN NULL;
END $$""")
    op.execute(f"""
CREATE TRIGGER record_created AFTER INSERT ON {schema}.{table}
REFERENCING NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION {schema}.record_{entity}_created()""")
    op.execute(f"""
CREATE TRIGGER record_deleted AFTER DELETE ON {schema}.{table}
REFERENCING OLD TABLE AS old_rows
FOR EACH STATEMENT EXECUTE FUNCTION {schema}.record_{entity}_deleted()""")
