"""Semantic deduplication: reinforcement counts, and memories kept outside exact dedupe.

``memories.reinforced_count`` and ``last_reinforced_at``: how many writes a
semantic deduplication merged into the memory, and when the last one did
(a reinforcement renews the memory's strength, like a tracked access).

``memories.content_unique``: false for a memory added with ``dedupe="off"``,
which may repeat another memory's content in its scope. The unique index
on content (of memories valid now, since 0027) covers only the others, so it
is recreated with that condition.

Revision ID: 0030
Revises: 0029
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from memsvc.core.time_limits import in_range_sql
from memsvc.db.migrate import settings_for_migration
from memsvc.db.tables import (
    CONTENT_UNIQUE_COMMENT,
    LAST_REINFORCED_AT_COMMENT,
    REINFORCED_COUNT_COMMENT,
)

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCOPE = ["tenant_id", "project_id", "agent_id", "session_id", "content_hash"]


def upgrade() -> None:
    schema = settings_for_migration().db_schema
    op.add_column(
        "memories",
        sa.Column(
            "reinforced_count",
            sa.Integer(),
            server_default=sa.text("0"),
            nullable=False,
            comment=REINFORCED_COUNT_COMMENT,
        ),
        schema=schema,
    )
    op.add_column(
        "memories",
        sa.Column(
            "last_reinforced_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment=LAST_REINFORCED_AT_COMMENT,
        ),
        schema=schema,
    )
    op.add_column(
        "memories",
        sa.Column(
            "content_unique",
            sa.Boolean(),
            server_default=sa.text("true"),
            nullable=False,
            comment=CONTENT_UNIQUE_COMMENT,
        ),
        schema=schema,
    )
    op.create_check_constraint(
        op.f("ck_memories_last_reinforced_at_range"),
        "memories",
        in_range_sql("last_reinforced_at"),
        schema=schema,
    )
    _content_index(schema, "key IS NULL AND valid_to IS NULL AND content_unique")


def downgrade() -> None:
    schema = settings_for_migration().db_schema
    # Copies stored with dedupe="off" would break the old index: they go first.
    op.execute(f"DELETE FROM {schema}.memories WHERE NOT content_unique")
    _content_index(schema, "key IS NULL AND valid_to IS NULL")
    op.drop_constraint("ck_memories_last_reinforced_at_range", "memories", schema=schema)
    op.drop_column("memories", "content_unique", schema=schema)
    op.drop_column("memories", "last_reinforced_at", schema=schema)
    op.drop_column("memories", "reinforced_count", schema=schema)


def _content_index(schema: str, where: str) -> None:
    op.drop_index("uq_memories_content", table_name="memories", schema=schema)
    op.create_index(
        "uq_memories_content",
        "memories",
        SCOPE,
        unique=True,
        schema=schema,
        postgresql_nulls_not_distinct=True,
        postgresql_where=sa.text(where),
    )
