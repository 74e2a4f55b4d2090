"""Memories: vectors kept in their rows (``embedding`` storage MAIN).

pgvector declares its types' storage EXTERNAL: once a row passes about
2 kB (a 384-dimension vector is 1.5 kB, so a few hundred bytes of content
and metadata are enough), PostgreSQL moved the vector out to the TOAST
table, and every exact search read it back from there, row by row, at
several times the cost of reading it from the row. With MAIN, content,
metadata and the text-search vector leave the row first; the vector leaves
only when the row could not fit in a page at all (vectors of thousands of
dimensions).

A catalog change, instant: rows written before keep their vectors where
they are until they are written again (an update, a re-embedding, or
``VACUUM FULL``).

Revision ID: 0034
Revises: 0033
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from memsvc.db.migrate import settings_for_migration

revision: str = "0034"
down_revision: str | None = "0033"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _set_storage(storage: str) -> None:
    schema = settings_for_migration().db_schema
    op.execute(f"ALTER TABLE {schema}.memories ALTER COLUMN embedding SET STORAGE {storage}")


def upgrade() -> None:
    _set_storage("MAIN")


def downgrade() -> None:
    _set_storage("EXTERNAL")
