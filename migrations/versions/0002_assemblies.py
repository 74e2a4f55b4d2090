"""Assemblies (named groups of memories) and their members.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from memsvc.db.migrate import settings_for_migration
from memsvc.db.tables import OPCLASSES, SCOPE_COMMENTS, vector_column_type

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    settings = settings_for_migration()
    schema = settings.db_schema
    op.create_table(
        "assemblies",
        sa.Column("tenant_id", sa.Text(), nullable=False, comment=SCOPE_COMMENTS["tenant_id"]),
        sa.Column("project_id", sa.Text(), nullable=True, comment=SCOPE_COMMENTS["project_id"]),
        sa.Column("agent_id", sa.Text(), nullable=True, comment=SCOPE_COMMENTS["agent_id"]),
        sa.Column("session_id", sa.Text(), nullable=True, comment=SCOPE_COMMENTS["session_id"]),
        sa.Column("id", sa.UUID(), nullable=False, comment="Assembly id."),
        sa.Column("name", sa.Text(), nullable=False, comment="Name, unique within the scope."),
        sa.Column(
            "description",
            sa.Text(),
            server_default=sa.text("''"),
            nullable=False,
            comment="What the group is for.",
        ),
        sa.Column(
            "metadata",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
            comment="Free-form JSON object.",
        ),
        sa.Column(
            "member_count",
            sa.Integer(),
            server_default=sa.text("0"),
            nullable=False,
            comment="Number of rows in assembly_members for this assembly.",
        ),
        sa.Column(
            "embedded_count",
            sa.Integer(),
            server_default=sa.text("0"),
            nullable=False,
            comment="Members that have an embedding (the centroid's denominator).",
        ),
        sa.Column(
            "embedding_sum",
            postgresql.ARRAY(sa.DOUBLE_PRECISION()),
            nullable=True,
            comment="Sum of the members' embeddings, kept in double precision.",
        ),
        sa.Column(
            "centroid",
            vector_column_type(settings),
            nullable=True,
            comment="Mean of the members' embeddings (NULL when none has one).",
        ),
        sa.Column(
            "version",
            sa.Integer(),
            server_default=sa.text("1"),
            nullable=False,
            comment="Incremented by every change.",
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="When the assembly was created.",
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="When the assembly or its membership last changed.",
        ),
        sa.CheckConstraint(
            "embedded_count >= 0 AND embedded_count <= member_count",
            name=op.f("ck_assemblies_embedded_count_range"),
        ),
        sa.CheckConstraint(
            "member_count >= 0", name=op.f("ck_assemblies_member_count_nonnegative")
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_assemblies")),
        schema=schema,
        comment="Named groups of memories.",
    )
    op.create_index(
        "ix_assemblies_centroid_hnsw",
        "assemblies",
        ["centroid"],
        schema=schema,
        postgresql_using="hnsw",
        postgresql_with={"m": settings.hnsw_m, "ef_construction": settings.hnsw_ef_construction},
        postgresql_ops={"centroid": OPCLASSES[(settings.vector_type, settings.distance)]},
    )
    op.create_index("ix_assemblies_id", "assemblies", ["id"], schema=schema)
    op.create_index(
        "uq_assemblies_name",
        "assemblies",
        ["tenant_id", "project_id", "agent_id", "session_id", "name"],
        unique=True,
        schema=schema,
        postgresql_nulls_not_distinct=True,
    )
    op.create_table(
        "assembly_members",
        sa.Column("tenant_id", sa.Text(), nullable=False, comment=SCOPE_COMMENTS["tenant_id"]),
        sa.Column("assembly_id", sa.UUID(), nullable=False, comment="The assembly."),
        sa.Column("memory_id", sa.UUID(), nullable=False, comment="The member memory."),
        sa.Column(
            "added_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="When the memory joined the assembly.",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id", "assembly_id"],
            [f"{schema}.assemblies.tenant_id", f"{schema}.assemblies.id"],
            name=op.f("fk_assembly_members_tenant_id_assemblies"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id", "memory_id"],
            [f"{schema}.memories.tenant_id", f"{schema}.memories.id"],
            name=op.f("fk_assembly_members_tenant_id_memories"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id", "assembly_id", "memory_id", name=op.f("pk_assembly_members")
        ),
        schema=schema,
        comment="Which memories belong to which assembly (one row per membership).",
    )
    op.create_index(
        "ix_assembly_members_memory", "assembly_members", ["tenant_id", "memory_id"], schema=schema
    )


def downgrade() -> None:
    schema = settings_for_migration().db_schema
    op.drop_table("assembly_members", schema=schema)
    op.drop_table("assemblies", schema=schema)
