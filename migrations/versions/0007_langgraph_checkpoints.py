"""LangGraph checkpointer tables (``memsvc.integrations.langgraph.MemsvcSaver``).

Checkpoints, channel-value blobs (one per channel version) and pending
writes, each keyed by tenant first, with the same row-level security policy
as the other tenant tables.

Revision ID: 0007
Revises: 0005
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from memsvc.db.migrate import settings_for_migration
from memsvc.db.tables import LANGGRAPH_COMMENTS, SCOPE_COMMENTS

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("langgraph_checkpoints", "langgraph_checkpoint_blobs", "langgraph_checkpoint_writes")


def _thread_columns() -> list[sa.Column[str]]:
    return [
        sa.Column("tenant_id", sa.Text(), nullable=False, comment=SCOPE_COMMENTS["tenant_id"]),
        sa.Column("thread_id", sa.Text(), nullable=False, comment=LANGGRAPH_COMMENTS["thread_id"]),
        sa.Column(
            "checkpoint_ns", sa.Text(), nullable=False, comment=LANGGRAPH_COMMENTS["checkpoint_ns"]
        ),
    ]


def upgrade() -> None:
    settings = settings_for_migration()
    schema = settings.db_schema
    op.create_table(
        "langgraph_checkpoints",
        *_thread_columns(),
        sa.Column("checkpoint_id", sa.Text(), nullable=False, comment="LangGraph checkpoint id."),
        sa.Column(
            "parent_checkpoint_id",
            sa.Text(),
            nullable=True,
            comment="The checkpoint this one continues (NULL for a thread's first).",
        ),
        sa.Column(
            "checkpoint_type", sa.Text(), nullable=False, comment="Serializer type of checkpoint."
        ),
        sa.Column(
            "checkpoint",
            postgresql.BYTEA(),
            nullable=False,
            comment="The serialized checkpoint without its channel values (kept in blobs).",
        ),
        sa.Column(
            "channels",
            postgresql.ARRAY(sa.Text()),
            nullable=False,
            comment="Channels of the checkpoint, in step with versions.",
        ),
        sa.Column(
            "versions",
            postgresql.ARRAY(sa.Text()),
            nullable=False,
            comment="Version of each channel: the blob holding its value.",
        ),
        sa.Column(
            "metadata",
            postgresql.JSONB(astext_type=sa.Text()),
            nullable=False,
            comment="Checkpoint metadata (filterable).",
        ),
        sa.Column(
            "run_id", sa.Text(), nullable=True, comment="metadata.run_id, for delete_for_runs."
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("clock_timestamp()"),
            nullable=False,
            comment="When it was stored.",
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id",
            "thread_id",
            "checkpoint_ns",
            "checkpoint_id",
            name=op.f("pk_langgraph_checkpoints"),
        ),
        schema=schema,
        comment="LangGraph checkpoints (MemsvcSaver); channel values live in "
        "langgraph_checkpoint_blobs.",
    )
    op.create_index(
        "ix_langgraph_checkpoints_run",
        "langgraph_checkpoints",
        ["tenant_id", "run_id"],
        schema=schema,
    )
    op.create_table(
        "langgraph_checkpoint_blobs",
        *_thread_columns(),
        sa.Column("channel", sa.Text(), nullable=False, comment="Channel name."),
        sa.Column("version", sa.Text(), nullable=False, comment="Channel version."),
        sa.Column(
            "blob_type", sa.Text(), nullable=False, comment="Serializer type ('empty': no value)."
        ),
        sa.Column(
            "blob", postgresql.BYTEA(), nullable=True, comment="The serialized channel value."
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id",
            "thread_id",
            "checkpoint_ns",
            "channel",
            "version",
            name=op.f("pk_langgraph_checkpoint_blobs"),
        ),
        schema=schema,
        comment="LangGraph channel values, one per channel version, shared by the "
        "checkpoints that reference that version.",
    )
    op.create_table(
        "langgraph_checkpoint_writes",
        *_thread_columns(),
        sa.Column(
            "checkpoint_id", sa.Text(), nullable=False, comment="Checkpoint the writes follow."
        ),
        sa.Column("task_id", sa.Text(), nullable=False, comment="Task that made the write."),
        sa.Column(
            "idx", sa.Integer(), nullable=False, comment="Index of the write (negative: special)."
        ),
        sa.Column("channel", sa.Text(), nullable=False, comment="Channel written."),
        sa.Column("value_type", sa.Text(), nullable=False, comment="Serializer type of value."),
        sa.Column("value", postgresql.BYTEA(), nullable=True, comment="The serialized value."),
        sa.Column(
            "task_path",
            sa.Text(),
            server_default=sa.text("''"),
            nullable=False,
            comment="Path of the task (orders a step's writes).",
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id",
            "thread_id",
            "checkpoint_ns",
            "checkpoint_id",
            "task_id",
            "idx",
            name=op.f("pk_langgraph_checkpoint_writes"),
        ),
        schema=schema,
        comment="LangGraph pending writes of tasks, per checkpoint.",
    )
    for table in TABLES:
        op.execute(
            f"CREATE POLICY tenant_isolation ON {schema}.{table} "
            "USING (tenant_id = current_setting('memsvc.tenant', true)) "
            "WITH CHECK (tenant_id = current_setting('memsvc.tenant', true))"
        )
        if settings.row_level_security:
            op.execute(f"ALTER TABLE {schema}.{table} ENABLE ROW LEVEL SECURITY")
            op.execute(f"ALTER TABLE {schema}.{table} FORCE ROW LEVEL SECURITY")


def downgrade() -> None:
    schema = settings_for_migration().db_schema
    for table in reversed(TABLES):
        op.drop_table(table, schema=schema)
