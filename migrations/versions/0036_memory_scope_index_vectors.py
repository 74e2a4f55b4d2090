"""Memories: the catalog of scope indexes records how many vectors each holds.

A search of a subtree with a small graph of its own walks it as a scope's
own graph is walked (``memsvc.db.hnsw_walks``); the count, taken when the
index is built and again by each gc, says which subtrees are small.
Additive: a nullable column; rows recorded before stay NULL (not counted:
their searches keep the configured walk) until gc counts them.

Revision ID: 0036
Revises: 0035
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from memsvc.db.migrate import settings_for_migration
from memsvc.db.tables_features import SCOPE_INDEX_VECTORS_COMMENT

revision: str = "0036"
down_revision: str | None = "0035"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "memory_scope_indexes"


def upgrade() -> None:
    op.add_column(
        TABLE,
        sa.Column("vectors", sa.BigInteger(), comment=SCOPE_INDEX_VECTORS_COMMENT),
        schema=settings_for_migration().db_schema,
    )


def downgrade() -> None:
    op.drop_column(TABLE, "vectors", schema=settings_for_migration().db_schema)
