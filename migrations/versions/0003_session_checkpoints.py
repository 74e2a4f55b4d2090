"""Durable session checkpoints.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from memsvc.db.migrate import settings_for_migration
from memsvc.db.tables import SCOPE_COMMENTS

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = settings_for_migration().db_schema
    op.create_table(
        "session_checkpoints",
        sa.Column("tenant_id", sa.Text(), nullable=False, comment=SCOPE_COMMENTS["tenant_id"]),
        sa.Column("project_id", sa.Text(), nullable=True, comment=SCOPE_COMMENTS["project_id"]),
        sa.Column("agent_id", sa.Text(), nullable=True, comment=SCOPE_COMMENTS["agent_id"]),
        sa.Column("session_id", sa.Text(), nullable=False, comment="Session of the agent."),
        sa.Column("id", sa.UUID(), nullable=False, comment="Checkpoint id (a full uuid)."),
        sa.Column(
            "description",
            sa.Text(),
            server_default=sa.text("''"),
            nullable=False,
            comment="What the checkpoint marks.",
        ),
        sa.Column(
            "data",
            postgresql.JSONB(astext_type=sa.Text()),
            nullable=False,
            comment="The saved session state.",
        ),
        sa.Column("size_bytes", sa.Integer(), nullable=False, comment="Size of data as JSON text."),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("clock_timestamp()"),
            nullable=False,
            comment="When it was taken.",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_session_checkpoints")),
        schema=schema,
        comment="Durable snapshots of session state; the newest N per session are kept.",
    )
    op.create_index("ix_session_checkpoints_id", "session_checkpoints", ["id"], schema=schema)
    op.create_index(
        "ix_session_checkpoints_session",
        "session_checkpoints",
        [
            "tenant_id",
            "project_id",
            "agent_id",
            "session_id",
            sa.literal_column("created_at DESC"),
            sa.literal_column("id DESC"),
        ],
        schema=schema,
    )


def downgrade() -> None:
    schema = settings_for_migration().db_schema
    op.drop_table("session_checkpoints", schema=schema)
