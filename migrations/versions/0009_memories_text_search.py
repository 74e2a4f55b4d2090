"""Full-text search over memories: a generated tsvector column and its GIN index.

The column is computed by PostgreSQL from ``content`` under the configured
text search configuration (``Settings.text_search_config``, read here like
0001 reads the embedding dimension) and recorded in ``schema_info``, so a
service opened with another configuration is refused instead of silently
querying with mismatched lexemes. Changing the configuration: downgrade to
0008 and upgrade again with the new setting; the column is rebuilt.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from memsvc.db.migrate import settings_for_migration
from memsvc.db.tables import content_tsv_expression

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    settings = settings_for_migration()
    schema = settings.db_schema
    op.add_column(
        "memories",
        sa.Column(
            "content_tsv",
            postgresql.TSVECTOR(),
            sa.Computed(content_tsv_expression(settings.text_search_config), persisted=True),
            nullable=True,
            comment="Text search vector of content, kept by the database.",
        ),
        schema=schema,
    )
    op.create_index(
        "ix_memories_content_tsv",
        "memories",
        ["content_tsv"],
        schema=schema,
        postgresql_using="gin",
        # No pending list: searches right after a burst of writes stay fast.
        postgresql_with={"fastupdate": "off"},
    )
    # The name is a validated identifier, so a literal renders in offline SQL too.
    op.execute(
        f"INSERT INTO {schema}.schema_info (key, value) "
        f"VALUES ('text_search_config', '{settings.text_search_config}')"
    )


def downgrade() -> None:
    settings = settings_for_migration()
    schema = settings.db_schema
    op.execute(f"DELETE FROM {schema}.schema_info WHERE key = 'text_search_config'")
    op.drop_index("ix_memories_content_tsv", table_name="memories", schema=schema)
    op.drop_column("memories", "content_tsv", schema=schema)
