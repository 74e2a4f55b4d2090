"""Online embedding-model migrations: the table that says one is in progress.

``memsvc reembed`` records the new embedder here, adds the second embedding
column itself (its dimension is the new model's, only known then) and, at
the switch, sets ``switched_at``. Services read the table at open and
re-check it every ``embedding_state_refresh_s`` seconds, so writers embed
with both models while a migration runs.

Revision ID: 0017
Revises: 0013
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from memsvc.db.migrate import settings_for_migration

revision: str = "0017"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = settings_for_migration().db_schema
    op.create_table(
        "embedding_migrations",
        sa.Column(
            "id",
            sa.BigInteger(),
            sa.Identity(always=False),
            nullable=False,
            comment="Migration id.",
        ),
        sa.Column(
            "embedder",
            sa.Text(),
            nullable=False,
            comment="Spec of the new embedder (as MEMSVC_EMBEDDER: hashing, openai:..., "
            "local:...).",
        ),
        sa.Column("dim", sa.Integer(), nullable=False, comment="Dimension of the new embeddings."),
        sa.Column(
            "started_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
            comment="When the new column was added.",
        ),
        sa.Column(
            "switched_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="When searches moved to the new embeddings (NULL: in progress).",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_embedding_migrations")),
        schema=schema,
        comment="Online embedding-model migrations (memsvc reembed): the row with no "
        "switched_at is in progress, and writers embed with both models meanwhile.",
    )


def downgrade() -> None:
    schema = settings_for_migration().db_schema
    op.drop_table("embedding_migrations", schema=schema)
