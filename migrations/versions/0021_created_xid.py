"""Erasure's cut by commit: ``created_xid`` on memories, assemblies, session checkpoints.

Erasure removes what committed before it began. It used to select those rows
by ``created_at <= start``, but ``created_at`` can be supplied by an import
(a skewed clock or an edited file), and a row dated in the future was never
erased. ``created_xid`` is the creating transaction's id, set by the server;
erasure compares it with the snapshot it took when it began
(``pg_visible_in_snapshot``).

Existing rows get id 1 (a constant default: no table rewrite), which every
snapshot sees as committed; new rows the writing transaction's id.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from memsvc.db.migrate import settings_for_migration
from memsvc.db.tables import CREATED_XID_COMMENT, CURRENT_XID, XID8

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("memories", "assemblies", "session_checkpoints")


def upgrade() -> None:
    schema = settings_for_migration().db_schema
    for table in TABLES:
        op.add_column(
            table,
            sa.Column(
                "created_xid",
                XID8(),
                nullable=False,
                server_default=sa.text("'1'::xid8"),
                comment=CREATED_XID_COMMENT,
            ),
            schema=schema,
        )
        op.alter_column(table, "created_xid", server_default=sa.text(CURRENT_XID), schema=schema)


def downgrade() -> None:
    schema = settings_for_migration().db_schema
    for table in TABLES:
        op.drop_column(table, "created_xid", schema=schema)
