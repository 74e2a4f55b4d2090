"""Memories, their history, and the settings fixed at creation.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from memsvc.db.migrate import settings_for_migration
from memsvc.db.partition_queries import create_partitions
from memsvc.db.partitions import partition_by
from memsvc.db.tables import OPCLASSES, SCOPE_COMMENTS, vector_column_type

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCOPE = ["tenant_id", "project_id", "agent_id", "session_id"]


def _scope_columns() -> list[sa.Column[str]]:
    return [
        sa.Column("tenant_id", sa.Text(), nullable=False, comment=SCOPE_COMMENTS["tenant_id"]),
        sa.Column("project_id", sa.Text(), nullable=True, comment=SCOPE_COMMENTS["project_id"]),
        sa.Column("agent_id", sa.Text(), nullable=True, comment=SCOPE_COMMENTS["agent_id"]),
        sa.Column("session_id", sa.Text(), nullable=True, comment=SCOPE_COMMENTS["session_id"]),
    ]


def upgrade() -> None:
    settings = settings_for_migration()
    schema = settings.db_schema
    op.create_table(
        "schema_info",
        sa.Column(
            "key", sa.Text(), nullable=False, comment="Setting fixed at the first migration."
        ),
        sa.Column("value", sa.Text(), nullable=False, comment="Its value."),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_schema_info")),
        schema=schema,
        comment="Settings fixed when the schema was created (embedding dimension, vector type, "
        "distance); memsvc refuses to open with different ones.",
    )
    op.bulk_insert(
        sa.table(
            "schema_info", sa.column("key", sa.Text()), sa.column("value", sa.Text()), schema=schema
        ),
        [
            {"key": "embedding_dim", "value": str(settings.embedding_dim)},
            {"key": "vector_type", "value": settings.vector_type},
            {"key": "distance", "value": settings.distance},
        ],
    )
    op.create_table(
        "memories",
        *_scope_columns(),
        sa.Column("id", sa.UUID(), nullable=False, comment="Memory id (client-generatable)."),
        sa.Column(
            "key", sa.Text(), nullable=True, comment="Name of a keyed memory (put/get_by_key)."
        ),
        sa.Column("content", sa.Text(), nullable=False, comment="The remembered text."),
        sa.Column("content_hash", sa.Text(), nullable=False, comment="sha256:<hex> of content."),
        sa.Column(
            "metadata",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
            comment="Free-form JSON object, filterable in search.",
        ),
        sa.Column(
            "embedding",
            vector_column_type(settings),
            nullable=True,
            comment="Embedding of the content.",
        ),
        sa.Column(
            "importance",
            sa.REAL(),
            server_default=sa.text("0.5"),
            nullable=False,
            comment="Importance in [0, 1].",
        ),
        sa.Column(
            "version",
            sa.Integer(),
            server_default=sa.text("1"),
            nullable=False,
            comment="Incremented by every change (optimistic locking).",
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="When the memory was first written.",
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="When the memory last changed.",
        ),
        sa.Column(
            "expires_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="After this moment the memory is invisible and gc deletes it.",
        ),
        sa.Column(
            "access_count",
            sa.BigInteger(),
            server_default=sa.text("0"),
            nullable=False,
            comment="How many times the memory was returned by get.",
        ),
        sa.Column(
            "last_accessed_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="When the memory was last returned by get.",
        ),
        sa.CheckConstraint(
            "content_hash LIKE 'sha256:%'", name=op.f("ck_memories_content_hash_format")
        ),
        sa.CheckConstraint(
            "importance >= 0 AND importance <= 1", name=op.f("ck_memories_importance_range")
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_memories")),
        schema=schema,
        comment="Long-term agent memories, one row each.",
        # Settings.partitions > 1: hash partitions by tenant, fixed here like the
        # dimension (0019 records the count). The indexes below are declared on
        # the parent, so every partition gets its own.
        postgresql_partition_by=partition_by(settings.partition_count),
    )
    for statement in create_partitions(schema, "memories", settings.partition_count):
        op.execute(statement)
    op.create_index(
        "ix_memories_embedding_hnsw",
        "memories",
        ["embedding"],
        schema=schema,
        postgresql_using="hnsw",
        postgresql_with={"m": settings.hnsw_m, "ef_construction": settings.hnsw_ef_construction},
        postgresql_ops={"embedding": OPCLASSES[(settings.vector_type, settings.distance)]},
    )
    op.create_index(
        "ix_memories_expires_at",
        "memories",
        ["expires_at"],
        schema=schema,
        postgresql_where=sa.text("expires_at IS NOT NULL"),
    )
    op.create_index("ix_memories_id", "memories", ["id"], schema=schema)
    op.create_index(
        "ix_memories_metadata", "memories", ["metadata"], schema=schema, postgresql_using="gin"
    )
    op.create_index("ix_memories_scope", "memories", [*SCOPE, "id"], schema=schema)
    op.create_index(
        "uq_memories_content",
        "memories",
        [*SCOPE, "content_hash"],
        unique=True,
        schema=schema,
        postgresql_nulls_not_distinct=True,
        postgresql_where=sa.text("key IS NULL"),
    )
    op.create_index(
        "uq_memories_key",
        "memories",
        [*SCOPE, "key"],
        unique=True,
        schema=schema,
        postgresql_nulls_not_distinct=True,
        postgresql_where=sa.text("key IS NOT NULL"),
    )
    op.create_table(
        "memory_events",
        sa.Column("tenant_id", sa.Text(), nullable=False, comment=SCOPE_COMMENTS["tenant_id"]),
        sa.Column(
            "event_id",
            sa.BigInteger(),
            sa.Identity(always=False),
            nullable=False,
            comment="Increasing event number.",
        ),
        sa.Column("memory_id", sa.UUID(), nullable=False, comment="The memory changed."),
        sa.Column("kind", sa.Text(), nullable=False, comment="created, updated or deleted."),
        sa.Column(
            "version", sa.Integer(), nullable=False, comment="The memory's version after the event."
        ),
        sa.Column(
            "prior",
            postgresql.JSONB(astext_type=sa.Text()),
            nullable=True,
            comment="The values before the change (NULL for created).",
        ),
        sa.Column(
            "at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="When the change committed its statement.",
        ),
        sa.CheckConstraint(
            "kind IN ('created', 'updated', 'deleted')", name=op.f("ck_memory_events_kind")
        ),
        sa.PrimaryKeyConstraint("tenant_id", "event_id", name=op.f("pk_memory_events")),
        schema=schema,
        comment="Append-only history of memories, written in the same transaction as each change.",
    )
    op.create_index(
        "ix_memory_events_memory",
        "memory_events",
        ["tenant_id", "memory_id", "event_id"],
        schema=schema,
    )


def downgrade() -> None:
    schema = settings_for_migration().db_schema
    op.drop_table("memory_events", schema=schema)
    op.drop_table("memories", schema=schema)
    op.drop_table("schema_info", schema=schema)
