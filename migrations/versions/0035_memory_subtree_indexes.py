"""Memories: scope indexes of subtrees (a tenant's or a project's vectors).

A tenant or project subtree holding at least ``Settings.scope_index_from``
vectors, and at most a share of the table's, gets a partial HNSW index of
its own, which ``descendants`` searches of it walk. The catalog records
which rows each index holds: ``include`` is ``'exact'`` (every row so far)
or ``'descendants'``. Additive: a column with a default, a check; the
indexes themselves are built later, by gc, never by the migration.

Revision ID: 0035
Revises: 0034
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from memsvc.db.migrate import settings_for_migration
from memsvc.db.tables_features import SCOPE_INDEX_INCLUDE_COMMENT
from memsvc.memories import scope_index_queries

revision: str = "0035"
down_revision: str | None = "0034"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "memory_scope_indexes"
COMMENT = (
    "Scope indexes of memories: one partial HNSW index of memories per row, holding the "
    "vectors of one scope, or of its subtree (see memsvc.memories.scope_indexes)."
)
EARLIER_COMMENT = (
    "Scope indexes of memories: one partial HNSW index of memories per row, holding the "
    "vectors of exactly one scope (see memsvc.memories.scope_indexes)."
)


def upgrade() -> None:
    schema = settings_for_migration().db_schema
    op.add_column(
        TABLE,
        sa.Column(
            "include",
            sa.Text(),
            nullable=False,
            server_default=sa.text("'exact'"),
            comment=SCOPE_INDEX_INCLUDE_COMMENT,
        ),
        schema=schema,
    )
    op.create_check_constraint(
        op.f(f"ck_{TABLE}_include"), TABLE, "include IN ('exact', 'descendants')", schema=schema
    )
    op.create_table_comment(TABLE, COMMENT, existing_comment=EARLIER_COMMENT, schema=schema)


def downgrade() -> None:
    schema = settings_for_migration().db_schema
    # Subtree indexes go: the earlier revision neither uses nor drops them,
    # and each costs every write of memories. Found by their predicates (the
    # catalog may be hidden by row-level security); catalog rows left naming
    # them are forgotten by the earlier revision's gc.
    bind = op.get_bind()
    rows = bind.execute(sa.text(scope_index_queries.scope_indexes(schema))).mappings()
    for row in list(rows):
        read = scope_index_queries.read_predicate(row["predicate"], row["conforming"])
        if read is not None and read[1] == "descendants":
            op.execute(f'DROP INDEX IF EXISTS {schema}."{row["name"]}"')
    op.create_table_comment(TABLE, EARLIER_COMMENT, existing_comment=COMMENT, schema=schema)
    op.drop_constraint(op.f(f"ck_{TABLE}_include"), TABLE, schema=schema)
    op.drop_column(TABLE, "include", schema=schema)
