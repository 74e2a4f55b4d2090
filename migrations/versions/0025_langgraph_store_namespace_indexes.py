"""LangGraph store: a catalog of the namespace indexes memsvc builds.

A big namespace of a LangGraph store gets a partial HNSW index of its own,
whose predicate names the tenant and the namespace. Until now those indexes
were found by their name prefix and by matching text against their
deparsed predicates, which missed tenants whose ids need escaping (a
backslash). Each index now has a row here, keyed by the tenant and
namespace values, with its name and state: erasure, gc and the store find
an index by what it holds. Indexes built before this revision have no row;
erasure and gc still find them by reading their predicates back as values
(see ``memsvc.repositories.langgraph_store_indexes``), and gc records them.

Tenant-leading key and the same row-level security policy as the other
tenant tables (enabled and forced when the setting is on at migration time).

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from memsvc.db.migrate import settings_for_migration
from memsvc.db.tables import SCOPE_COMMENTS

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "langgraph_store_namespace_indexes"


def upgrade() -> None:
    settings = settings_for_migration()
    schema = settings.db_schema
    op.create_table(
        TABLE,
        sa.Column("tenant_id", sa.Text(), nullable=False, comment=SCOPE_COMMENTS["tenant_id"]),
        sa.Column(
            "prefix",
            sa.Text(collation="C"),
            nullable=False,
            comment="The namespace the index holds the vectors of (and those under it).",
        ),
        sa.Column(
            "index_name",
            sa.Text(),
            nullable=False,
            comment="The partial HNSW index of langgraph_store_vectors, in this schema.",
        ),
        sa.Column(
            "state",
            sa.Text(),
            nullable=False,
            comment="'building' (claimed by a build, or one that stopped) or 'ready'.",
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="When the state was last set.",
        ),
        sa.CheckConstraint("state IN ('building', 'ready')", name=op.f(f"ck_{TABLE}_state")),
        sa.PrimaryKeyConstraint("tenant_id", "prefix", name=op.f(f"pk_{TABLE}")),
        schema=schema,
        comment="Namespace indexes of LangGraph stores: one partial HNSW index of "
        "langgraph_store_vectors per row.",
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
    op.drop_table(TABLE, schema=schema)
