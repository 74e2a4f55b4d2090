"""As-of reads: the commit time of each history event, persisted.

``memory_events.committed_at`` holds the commit timestamp of the transaction
that wrote the event. It starts NULL: a transaction cannot know its own commit
time, so readers take ``pg_xact_commit_timestamp(xmin)`` (the server setting
``track_commit_timestamp``) until gc copies it into the column, before the
server forgets it (commit timestamps of frozen transactions are truncated
with the commit log). Two indexes find the events committed after a moment:
one on the persisted times, a partial one on the rows not yet persisted.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from memsvc.db.migrate import settings_for_migration
from memsvc.db.tables import AT_COMMENT, COMMITTED_AT_COMMENT

# What 0001 said of ``at``: not so, it is the transaction's start.
OLD_AT_COMMENT = "When the change committed its statement."

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = settings_for_migration().db_schema
    op.alter_column(
        "memory_events",
        "at",
        existing_type=sa.DateTime(timezone=True),
        existing_nullable=False,
        existing_server_default=sa.text("now()"),
        comment=AT_COMMENT,
        existing_comment=OLD_AT_COMMENT,
        schema=schema,
    )
    op.add_column(
        "memory_events",
        sa.Column(
            "committed_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment=COMMITTED_AT_COMMENT,
        ),
        schema=schema,
    )
    op.create_index(
        "ix_memory_events_committed",
        "memory_events",
        ["tenant_id", "committed_at"],
        schema=schema,
    )
    op.create_index(
        "ix_memory_events_uncommitted",
        "memory_events",
        ["tenant_id"],
        schema=schema,
        postgresql_where=sa.text("committed_at IS NULL"),
    )


def downgrade() -> None:
    schema = settings_for_migration().db_schema
    op.drop_index("ix_memory_events_uncommitted", "memory_events", schema=schema)
    op.drop_index("ix_memory_events_committed", "memory_events", schema=schema)
    op.drop_column("memory_events", "committed_at", schema=schema)
    op.alter_column(
        "memory_events",
        "at",
        existing_type=sa.DateTime(timezone=True),
        existing_nullable=False,
        existing_server_default=sa.text("now()"),
        comment=OLD_AT_COMMENT,
        existing_comment=AT_COMMENT,
        schema=schema,
    )
