"""Memories: a catalog of the scope indexes memsvc builds.

An exact scope holding at least ``Settings.scope_index_from`` vectors gets a
partial HNSW index of its own (built concurrently by gc or
``svc.maintenance.index_scopes()``), whose predicate names the scope's
levels. Each index has a row here, keyed by the tenant and the index name
(a digest of the scope), with the scope's levels and its state: searches
learn which scopes have one, and delete_scope, erasure and gc find an index
by the values it holds. Additive; the indexes themselves are built later,
never by the migration.

Tenant-leading key and the same row-level security policy as the other
tenant tables (enabled and forced when the setting is on at migration time).

Revision ID: 0032
Revises: 0031
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from memsvc.db.migrate import settings_for_migration
from memsvc.db.tables import SCOPE_COMMENTS
from memsvc.db.tables_features import SCOPE_INDEX_NAME_COMMENT, SCOPE_INDEX_STATE_COMMENT

revision: str = "0032"
down_revision: str | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "memory_scope_indexes"
INDEX_PREFIX = "ix_memories_scope_"
# The table's comment as this revision wrote it (0035 widened it to subtrees).
SCOPE_INDEXES_COMMENT = (
    "Scope indexes of memories: one partial HNSW index of memories per row, holding the "
    "vectors of exactly one scope (see memsvc.memories.scope_indexes)."
)


def upgrade() -> None:
    settings = settings_for_migration()
    schema = settings.db_schema
    op.create_table(
        TABLE,
        sa.Column("tenant_id", sa.Text(), nullable=False, comment=SCOPE_COMMENTS["tenant_id"]),
        sa.Column("project_id", sa.Text(), nullable=True, comment=SCOPE_COMMENTS["project_id"]),
        sa.Column("agent_id", sa.Text(), nullable=True, comment=SCOPE_COMMENTS["agent_id"]),
        sa.Column("session_id", sa.Text(), nullable=True, comment=SCOPE_COMMENTS["session_id"]),
        sa.Column("index_name", sa.Text(), nullable=False, comment=SCOPE_INDEX_NAME_COMMENT),
        sa.Column("state", sa.Text(), nullable=False, comment=SCOPE_INDEX_STATE_COMMENT),
        sa.CheckConstraint("state IN ('building', 'ready')", name=op.f(f"ck_{TABLE}_state")),
        sa.PrimaryKeyConstraint("tenant_id", "index_name", name=op.f(f"pk_{TABLE}")),
        schema=schema,
        comment=SCOPE_INDEXES_COMMENT,
    )
    op.execute(
        f"CREATE POLICY tenant_isolation ON {schema}.{TABLE} "
        "USING (tenant_id = current_setting('memsvc.tenant', true)) "
        "WITH CHECK (tenant_id = current_setting('memsvc.tenant', true))"
    )
    if settings.row_level_security:
        op.execute(f"ALTER TABLE {schema}.{TABLE} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {schema}.{TABLE} FORCE ROW LEVEL SECURITY")


def downgrade() -> None:
    schema = settings_for_migration().db_schema
    # The scope indexes the catalog listed go with it (a downgraded memsvc
    # neither uses nor drops them; each costs every write of memories).
    bind = op.get_bind()
    names = bind.execute(
        sa.text(
            "SELECT c.relname FROM pg_index AS x JOIN pg_class AS c ON c.oid = x.indexrelid "
            "WHERE x.indrelid = to_regclass(:table) AND left(c.relname, :n) = :prefix"
        ),
        {"table": f"{schema}.memories", "n": len(INDEX_PREFIX), "prefix": INDEX_PREFIX},
    ).scalars()
    for name in list(names):
        op.execute(f'DROP INDEX IF EXISTS {schema}."{name}"')
    op.drop_table(TABLE, schema=schema)
