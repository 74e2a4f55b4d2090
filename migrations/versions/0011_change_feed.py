"""Change feed: ordering keys, event scopes, a ledger for assemblies and checkpoints.

- ``change_key`` (xid8) on memories, assemblies, session_checkpoints,
  memory_events and the new entity_events: the writing transaction's id,
  never below the key of the row's previous write. The feed delivers events
  in ``change_key`` order, only below the oldest transaction still running,
  so an event can never commit behind a consumer's cursor.
- memory_events gets the memory's project/agent/session (the feed filters by
  scope, also after the memory is gone); existing events are filled from the
  memory or from ``prior``.
- entity_events: content-free created/updated/deleted events of assemblies
  and checkpoints, written by triggers in the statement of each change.

Existing rows get key 1 (added with a constant default, no table rewrite);
new rows the writing transaction's id.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from memsvc.db.migrate import settings_for_migration
from memsvc.db.tables import CURRENT_XID, SCOPE_COMMENTS, XID8

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEYED_TABLES = {
    "memories": "the memory's latest write",
    "assemblies": "the assembly's latest write",
    "session_checkpoints": "the checkpoint's write",
    "memory_events": "the event",
}


def _comment(what: str) -> str:
    return (
        f"Change-feed ordering key of {what}: the writing transaction's id, "
        "never below the key of the row's previous write."
    )


def _add_change_key(schema: str, table: str, what: str) -> None:
    # A constant default fills existing rows without rewriting the table;
    # then new rows take the writing transaction's id.
    op.add_column(
        table,
        sa.Column(
            "change_key",
            XID8(),
            nullable=False,
            server_default=sa.text("'1'::xid8"),
            comment=_comment(what),
        ),
        schema=schema,
    )
    op.alter_column(table, "change_key", server_default=sa.text(CURRENT_XID), schema=schema)


def upgrade() -> None:
    settings = settings_for_migration()
    schema = settings.db_schema
    for table, what in KEYED_TABLES.items():
        _add_change_key(schema, table, what)
    for column, comment in (
        ("project_id", "Project of the memory."),
        ("agent_id", "Agent of the memory."),
        ("session_id", "Session of the memory."),
    ):
        op.add_column(
            "memory_events",
            sa.Column(column, sa.Text(), nullable=True, comment=comment),
            schema=schema,
        )
    # Existing events: the scope of the memory, or (once it is gone) the
    # scope its last update or delete recorded in prior.
    op.execute(f"""
UPDATE {schema}.memory_events AS e
SET project_id = m.project_id, agent_id = m.agent_id, session_id = m.session_id
FROM {schema}.memories AS m
WHERE m.tenant_id = e.tenant_id AND m.id = e.memory_id""")
    op.execute(f"""
UPDATE {schema}.memory_events AS e
SET project_id = s.scope->>1, agent_id = s.scope->>2, session_id = s.scope->>3
FROM (
    SELECT DISTINCT ON (tenant_id, memory_id) tenant_id, memory_id, prior->'scope' AS scope
    FROM {schema}.memory_events WHERE prior ? 'scope'
    ORDER BY tenant_id, memory_id, event_id DESC
) AS s
WHERE s.tenant_id = e.tenant_id AND s.memory_id = e.memory_id
  AND NOT EXISTS (
      SELECT 1 FROM {schema}.memories AS m WHERE m.tenant_id = e.tenant_id AND m.id = e.memory_id
  )""")
    op.create_index(
        "ix_memory_events_change_key",
        "memory_events",
        ["change_key", "event_id"],
        schema=schema,
    )
    op.create_index("ix_memory_events_at", "memory_events", ["at"], schema=schema)

    op.create_table(
        "entity_events",
        *(
            sa.Column(column, sa.Text(), nullable=column != "tenant_id", comment=comment)
            for column, comment in SCOPE_COMMENTS.items()
        ),
        sa.Column(
            "event_id",
            sa.BigInteger(),
            sa.Identity(always=False),
            nullable=False,
            comment="Increasing event number.",
        ),
        sa.Column("entity", sa.Text(), nullable=False, comment="assembly or checkpoint."),
        sa.Column(
            "entity_id", postgresql.UUID(as_uuid=True), nullable=False, comment="The row changed."
        ),
        sa.Column("kind", sa.Text(), nullable=False, comment="created, updated or deleted."),
        sa.Column(
            "version", sa.Integer(), nullable=False, comment="The row's version after the event."
        ),
        sa.Column(
            "at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
            comment="When the writing transaction started (now()).",
        ),
        sa.Column(
            "change_key",
            XID8(),
            nullable=False,
            server_default=sa.text(CURRENT_XID),
            comment=_comment("the event"),
        ),
        sa.PrimaryKeyConstraint("tenant_id", "event_id", name=op.f("pk_entity_events")),
        sa.CheckConstraint(
            "entity IN ('assembly', 'checkpoint')", name=op.f("ck_entity_events_entity")
        ),
        sa.CheckConstraint(
            "kind IN ('created', 'updated', 'deleted')", name=op.f("ck_entity_events_kind")
        ),
        schema=schema,
        comment="Content-free change ledger of assemblies and session checkpoints, written "
        "by triggers in the same statement as each change (the change feed reads it).",
    )
    op.create_index(
        "ix_entity_events_change_key",
        "entity_events",
        ["change_key", "event_id"],
        schema=schema,
    )
    op.create_index("ix_entity_events_at", "entity_events", ["at"], schema=schema)
    op.execute(
        f"CREATE POLICY tenant_isolation ON {schema}.entity_events "
        "USING (tenant_id = current_setting('memsvc.tenant', true)) "
        "WITH CHECK (tenant_id = current_setting('memsvc.tenant', true))"
    )
    if settings.row_level_security:
        op.execute(f"ALTER TABLE {schema}.entity_events ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {schema}.entity_events FORCE ROW LEVEL SECURITY")
    _create_triggers(schema)


def _create_triggers(schema: str) -> None:
    scope = "tenant_id, project_id, agent_id, session_id"
    # An update's key is read from the row it replaces: the latest committed
    # version, which the writer holds locked. A transaction that took its id
    # early and then waited for that lock thus never writes a key below the
    # previous writer's.
    op.execute(f"""
CREATE FUNCTION {schema}.bump_change_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.change_key := greatest(pg_current_xact_id(), OLD.change_key);
    RETURN NEW;
END $$""")
    op.execute(f"""
CREATE TRIGGER bump_change_key BEFORE UPDATE ON {schema}.assemblies
FOR EACH ROW EXECUTE FUNCTION {schema}.bump_change_key()""")
    # A memory id used again after a delete: the new 'created' event must not
    # sort before the 'deleted' one, which a transaction that took its id
    # early and waited for the deleter would otherwise do. A query in a
    # volatile function takes a fresh snapshot (READ COMMITTED), so it sees
    # the deleter that committed while this insert waited.
    op.execute(f"""
CREATE FUNCTION {schema}.follow_previous_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.change_key := greatest(NEW.change_key, (
        SELECT max(change_key) FROM {schema}.memory_events
        WHERE tenant_id = NEW.tenant_id AND memory_id = NEW.memory_id));
    RETURN NEW;
END $$""")
    op.execute(f"""
CREATE TRIGGER follow_previous_events BEFORE INSERT ON {schema}.memory_events
FOR EACH ROW WHEN (NEW.kind = 'created')
EXECUTE FUNCTION {schema}.follow_previous_events()""")
    for table, entity, version in (
        ("assemblies", "assembly", "version"),
        ("session_checkpoints", "checkpoint", "1"),
    ):
        op.execute(f"""
CREATE FUNCTION {schema}.record_{entity}_created() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.entity_events
        ({scope}, entity, entity_id, kind, version, change_key)
    SELECT {scope}, '{entity}', id, 'created', {version}, change_key FROM new_rows;
    RETURN NULL;
END $$""")
        op.execute(f"""
CREATE FUNCTION {schema}.record_{entity}_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.entity_events
        ({scope}, entity, entity_id, kind, version, change_key)
    SELECT {scope}, '{entity}', id, 'deleted', {version},
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
    op.execute(f"""
CREATE FUNCTION {schema}.record_assembly_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.entity_events
        ({scope}, entity, entity_id, kind, version, change_key)
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


def downgrade() -> None:
    schema = settings_for_migration().db_schema
    for table in ("assemblies", "session_checkpoints"):
        op.execute(f"DROP TRIGGER record_created ON {schema}.{table}")
        op.execute(f"DROP TRIGGER record_deleted ON {schema}.{table}")
    op.execute(f"DROP TRIGGER record_updated ON {schema}.assemblies")
    op.execute(f"DROP TRIGGER bump_change_key ON {schema}.assemblies")
    op.execute(f"DROP TRIGGER follow_previous_events ON {schema}.memory_events")
    op.drop_table("entity_events", schema=schema)
    for function in (
        "record_assembly_updated",
        "record_assembly_created",
        "record_assembly_deleted",
        "record_checkpoint_created",
        "record_checkpoint_deleted",
        "bump_change_key",
        "follow_previous_events",
    ):
        op.execute(f"DROP FUNCTION {schema}.{function}()")
    op.drop_index("ix_memory_events_at", table_name="memory_events", schema=schema)
    op.drop_index("ix_memory_events_change_key", table_name="memory_events", schema=schema)
    for column in ("session_id", "agent_id", "project_id"):
        op.drop_column("memory_events", column, schema=schema)
    for table in KEYED_TABLES:
        op.drop_column(table, "change_key", schema=schema)
