"""The ledger of ``svc.remember``: which messages each scope has remembered.

One row per message a remember batch applied, written in the batch's
transaction. A unique index on the exact scope and the message id (NULL
scope levels compared as equal) makes a message applied at most once per
scope, whatever calls race: a second writer waits for the first one's
commit and then finds the row. ``created_xid`` is erasure's cut, as on the
other scoped tables.

Tenant-leading keys and the same row-level security policy as the other
tenant tables (enabled and forced when the setting is on at migration time).

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from memsvc.db.migrate import settings_for_migration
from memsvc.db.tables import CREATED_XID_COMMENT, CURRENT_XID, SCOPE_COMMENTS, XID8

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "remembered_messages"


def upgrade() -> None:
    settings = settings_for_migration()
    schema = settings.db_schema
    op.create_table(
        TABLE,
        sa.Column("tenant_id", sa.Text(), nullable=False, comment=SCOPE_COMMENTS["tenant_id"]),
        sa.Column("project_id", sa.Text(), nullable=True, comment=SCOPE_COMMENTS["project_id"]),
        sa.Column("agent_id", sa.Text(), nullable=True, comment=SCOPE_COMMENTS["agent_id"]),
        sa.Column("session_id", sa.Text(), nullable=True, comment=SCOPE_COMMENTS["session_id"]),
        sa.Column("message_id", sa.Text(), nullable=False, comment="The app's id of the message."),
        sa.Column(
            "batch_id",
            sa.UUID(),
            nullable=False,
            comment="The remember batch (one transaction) that applied it.",
        ),
        sa.Column(
            "extractor",
            sa.Text(),
            nullable=False,
            comment="The extractor that read it: name/version.",
        ),
        sa.Column("model", sa.Text(), nullable=True, comment="The extractor's model, if any."),
        sa.Column(
            "remembered_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="When the batch committed (its transaction's start).",
        ),
        sa.Column(
            "created_xid",
            XID8(),
            server_default=sa.text(CURRENT_XID),
            nullable=False,
            comment=CREATED_XID_COMMENT,
        ),
        sa.PrimaryKeyConstraint("tenant_id", "batch_id", "message_id", name=op.f(f"pk_{TABLE}")),
        schema=schema,
        comment="Messages svc.remember has applied, one row each: a message id already "
        "here is never applied again in its scope.",
    )
    op.create_index(
        "uq_remembered_messages_message",
        TABLE,
        ["tenant_id", "project_id", "agent_id", "session_id", "message_id"],
        unique=True,
        schema=schema,
        postgresql_nulls_not_distinct=True,
    )
    op.execute(
        f"CREATE POLICY tenant_isolation ON {schema}.{TABLE} "
        "USING (tenant_id = current_setting('memsvc.tenant', true)) "
        "WITH CHECK (tenant_id = current_setting('memsvc.tenant', true))"
    )
    if settings.row_level_security:
        op.execute(f"ALTER TABLE {schema}.{TABLE} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {schema}.{TABLE} FORCE ROW LEVEL SECURITY")


def downgrade() -> None:
    schema = settings_for_migration().db_schema
    op.drop_table(TABLE, schema=schema)
