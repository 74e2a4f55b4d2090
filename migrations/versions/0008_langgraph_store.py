"""LangGraph store: items and the embeddings of their indexed fields.

Tenant-leading keys and the same row-level security policy as the other
tenant tables (enabled and forced when the setting is on at migration time).

Revision ID: 0008
Revises: 0005
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from memsvc.db.migrate import settings_for_migration
from memsvc.db.tables import OPCLASSES, SCOPE_COMMENTS, vector_column_type

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("langgraph_store_items", "langgraph_store_vectors")


def upgrade() -> None:
    settings = settings_for_migration()
    schema = settings.db_schema
    op.create_table(
        "langgraph_store_items",
        sa.Column("tenant_id", sa.Text(), nullable=False, comment=SCOPE_COMMENTS["tenant_id"]),
        sa.Column(
            "prefix",
            sa.Text(collation="C"),
            nullable=False,
            comment="The item's namespace: its labels joined with '.'.",
        ),
        sa.Column("key", sa.Text(), nullable=False, comment="The item's key within its namespace."),
        sa.Column(
            "value",
            postgresql.JSONB(astext_type=sa.Text()),
            nullable=False,
            comment="The item's value (a JSON object).",
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="When the item was first put.",
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="When the item was last put.",
        ),
        sa.Column(
            "expires_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="After this moment the item is invisible and gc deletes it.",
        ),
        sa.Column(
            "ttl_minutes",
            postgresql.DOUBLE_PRECISION(),
            nullable=True,
            comment="The item's TTL, applied again when a read refreshes it.",
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id", "prefix", "key", name=op.f("pk_langgraph_store_items")
        ),
        schema=schema,
        comment="Items of LangGraph stores (memsvc.integrations.langgraph.MemsvcStore).",
    )
    op.create_index(
        "ix_langgraph_store_items_expires_at",
        "langgraph_store_items",
        ["expires_at"],
        schema=schema,
        postgresql_where=sa.text("expires_at IS NOT NULL"),
    )
    op.create_table(
        "langgraph_store_vectors",
        sa.Column("tenant_id", sa.Text(), nullable=False, comment=SCOPE_COMMENTS["tenant_id"]),
        sa.Column(
            "prefix", sa.Text(collation="C"), nullable=False, comment="The item's namespace."
        ),
        sa.Column("key", sa.Text(), nullable=False, comment="The item's key."),
        sa.Column(
            "field",
            sa.Text(),
            nullable=False,
            comment="Path of the embedded text in the value ('$': the whole value).",
        ),
        sa.Column(
            "embedding",
            vector_column_type(settings),
            nullable=False,
            comment="Embedding of that text.",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id", "prefix", "key"],
            [
                f"{schema}.langgraph_store_items.tenant_id",
                f"{schema}.langgraph_store_items.prefix",
                f"{schema}.langgraph_store_items.key",
            ],
            name=op.f("fk_langgraph_store_vectors_tenant_id_langgraph_store_items"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id", "prefix", "key", "field", name=op.f("pk_langgraph_store_vectors")
        ),
        schema=schema,
        comment="Embeddings of the indexed fields of LangGraph store items.",
    )
    op.create_index(
        "ix_langgraph_store_vectors_embedding_hnsw",
        "langgraph_store_vectors",
        ["embedding"],
        schema=schema,
        postgresql_using="hnsw",
        postgresql_with={"m": settings.hnsw_m, "ef_construction": settings.hnsw_ef_construction},
        postgresql_ops={"embedding": OPCLASSES[(settings.vector_type, settings.distance)]},
    )
    for table in TABLES:
        op.execute(
            f"CREATE POLICY tenant_isolation ON {schema}.{table} "
            "USING (tenant_id = current_setting('memsvc.tenant', true)) "
            "WITH CHECK (tenant_id = current_setting('memsvc.tenant', true))"
        )
        if settings.row_level_security:
            op.execute(f"ALTER TABLE {schema}.{table} ENABLE ROW LEVEL SECURITY")
            op.execute(f"ALTER TABLE {schema}.{table} FORCE ROW LEVEL SECURITY")


def downgrade() -> None:
    schema = settings_for_migration().db_schema
    op.drop_table("langgraph_store_vectors", schema=schema)
    op.drop_table("langgraph_store_items", schema=schema)
