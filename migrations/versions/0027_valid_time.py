"""Valid time: when each memory's fact held, and which memory superseded which.

Additive. ``memories`` gains ``valid_from`` (NULL for the rows written
before it: valid since ``created_at``; new rows get the writing
transaction's time unless told otherwise), ``valid_to`` (NULL: still
valid), ``supersedes`` (the memories this one replaced) and
``superseded_by`` (the memory that replaced this one). No row is rewritten:
the columns are added without a default, which is set afterwards for new
rows only.

Exact deduplication now matches only memories whose validity is open: the
unique index on content becomes partial on ``valid_to IS NULL``, so a value
that comes back after being superseded is a new memory.

``memory_events`` gains ``links`` (the memories an event links: a
supersession's successor, a creation's predecessors) and two kinds,
``superseded`` and ``invalidated``. The range constraints of the two new
time columns, and the widened kind constraint, are added ``NOT VALID`` and
validated at once on an empty table, as revision 0024 does (old rows cannot
break them: the new columns are NULL and the kinds a superset).

Downgrading fails if two memories of a scope with the same content exist
(possible once one of them was superseded): the old index cannot hold them.

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from memsvc.db.migrate import settings_for_migration

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCOPE = ["tenant_id", "project_id", "agent_id", "session_id"]
IN_RANGE = "{column} BETWEEN '0001-01-02 00:00:00+00' AND '9999-12-30 23:59:59.999999+00'"
OLD_KINDS = "kind IN ('created', 'updated', 'deleted', 'erased')"
NEW_KINDS = "kind IN ('created', 'updated', 'deleted', 'erased', 'superseded', 'invalidated')"
OLD_KIND_COMMENT = "created, updated, deleted or erased."
NEW_KIND_COMMENT = "created, updated, deleted, erased, superseded or invalidated."


def _add_checked(schema: str, table: str, name: str, condition: str) -> None:
    op.execute(f"ALTER TABLE {schema}.{table} ADD CONSTRAINT {name} CHECK ({condition}) NOT VALID")
    # As in 0024: a populated table is not scanned under the migration's lock.
    op.execute(
        f"""DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM {schema}.{table}) THEN
        ALTER TABLE {schema}.{table} VALIDATE CONSTRAINT {name};
    END IF;
END $$"""
    )


def _content_index(schema: str, where: str) -> None:
    op.drop_index("uq_memories_content", table_name="memories", schema=schema)
    op.create_index(
        "uq_memories_content",
        "memories",
        [*SCOPE, "content_hash"],
        unique=True,
        schema=schema,
        postgresql_nulls_not_distinct=True,
        postgresql_where=sa.text(where),
    )


def upgrade() -> None:
    schema = settings_for_migration().db_schema
    time = sa.DateTime(timezone=True)
    op.add_column(
        "memories",
        sa.Column(
            "valid_from",
            time,
            nullable=True,
            comment="When the fact started to hold (NULL: since created_at).",
        ),
        schema=schema,
    )
    op.alter_column(
        "memories", "valid_from", server_default=sa.text("now()"), schema=schema
    )
    op.add_column(
        "memories",
        sa.Column(
            "valid_to", time, nullable=True, comment="When the fact stopped holding (NULL: holds)."
        ),
        schema=schema,
    )
    op.add_column(
        "memories",
        sa.Column(
            "supersedes",
            sa.ARRAY(sa.UUID()),
            nullable=True,
            comment="The memories this one superseded (NULL: none).",
        ),
        schema=schema,
    )
    op.add_column(
        "memories",
        sa.Column(
            "superseded_by",
            sa.UUID(),
            nullable=True,
            comment="The memory that superseded this one (NULL: none).",
        ),
        schema=schema,
    )
    for column in ("valid_from", "valid_to"):
        _add_checked(
            schema, "memories", f"ck_memories_{column}_range", IN_RANGE.format(column=column)
        )
    _content_index(schema, "key IS NULL AND valid_to IS NULL")
    op.add_column(
        "memory_events",
        sa.Column(
            "links",
            sa.ARRAY(sa.UUID()),
            nullable=True,
            comment="Memories the event links: a supersession's successor, "
            "a creation's predecessors.",
        ),
        schema=schema,
    )
    op.drop_constraint("ck_memory_events_kind", "memory_events", schema=schema)
    _add_checked(schema, "memory_events", "ck_memory_events_kind", NEW_KINDS)
    op.alter_column(
        "memory_events", "kind", comment=NEW_KIND_COMMENT, existing_comment=OLD_KIND_COMMENT,
        existing_type=sa.Text(), existing_nullable=False, schema=schema,
    )


def downgrade() -> None:
    schema = settings_for_migration().db_schema
    op.alter_column(
        "memory_events", "kind", comment=OLD_KIND_COMMENT, existing_comment=NEW_KIND_COMMENT,
        existing_type=sa.Text(), existing_nullable=False, schema=schema,
    )
    op.drop_constraint("ck_memory_events_kind", "memory_events", schema=schema)
    _add_checked(schema, "memory_events", "ck_memory_events_kind", OLD_KINDS)
    op.drop_column("memory_events", "links", schema=schema)
    _content_index(schema, "key IS NULL")
    for column in ("valid_from", "valid_to"):
        op.drop_constraint(f"ck_memories_{column}_range", "memories", schema=schema)
    for column in ("superseded_by", "supersedes", "valid_to", "valid_from"):
        op.drop_column("memories", column, schema=schema)
