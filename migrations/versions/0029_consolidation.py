"""The state of ``svc.maintenance.consolidate``: clusters, and the memories it has seen.

``consolidation_clusters`` holds one row per cluster: its assembly (whose
scope and members are the cluster's; deleting the assembly removes the row)
and its summary memory. ``consolidation_members`` holds one row per memory a
run has considered, with the cluster it joined (NULL: none yet); its key
(tenant, memory) keeps a memory in at most one cluster whatever runs race.
Both rows go with the memory or the assembly they name (foreign keys, ON
DELETE CASCADE), so deleting or erasing memories needs nothing more. Both
tables are keyed by tenant first and get the tenant isolation policy of the
other tenant tables.

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from memsvc.db.migrate import settings_for_migration
from memsvc.db.tables import SCOPE_COMMENTS

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CLUSTERS = "consolidation_clusters"
MEMBERS = "consolidation_members"


def upgrade() -> None:
    settings = settings_for_migration()
    schema = settings.db_schema
    op.create_table(
        CLUSTERS,
        sa.Column("tenant_id", sa.Text(), nullable=False, comment=SCOPE_COMMENTS["tenant_id"]),
        sa.Column(
            "assembly_id",
            sa.UUID(),
            nullable=False,
            comment="The cluster's assembly (its members; its scope is the cluster's).",
        ),
        sa.Column(
            "summary_id",
            sa.UUID(),
            nullable=True,
            comment="The summary memory (NULL until the first summary commits).",
        ),
        sa.Column(
            "summarized_count",
            sa.Integer(),
            server_default=sa.text("0"),
            nullable=False,
            comment="Members the current summary was written from.",
        ),
        sa.Column(
            "summarizer",
            sa.Text(),
            nullable=False,
            comment="The summarizer that wrote the summary: name/version.",
        ),
        sa.Column("model", sa.Text(), nullable=True, comment="The summarizer's model, if any."),
        sa.ForeignKeyConstraint(
            ["tenant_id", "assembly_id"],
            [f"{schema}.assemblies.tenant_id", f"{schema}.assemblies.id"],
            name=op.f(f"fk_{CLUSTERS}_tenant_id_assemblies"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "assembly_id", name=op.f(f"pk_{CLUSTERS}")),
        schema=schema,
        comment="Clusters svc.maintenance.consolidate made: one assembly and one summary "
        "memory each.",
    )
    op.create_table(
        MEMBERS,
        sa.Column("tenant_id", sa.Text(), nullable=False, comment=SCOPE_COMMENTS["tenant_id"]),
        sa.Column("memory_id", sa.UUID(), nullable=False, comment="The memory."),
        sa.Column(
            "assembly_id",
            sa.UUID(),
            nullable=True,
            comment="Its cluster (NULL: considered, in no cluster yet).",
        ),
        sa.Column(
            "memory_version",
            sa.Integer(),
            nullable=False,
            comment="The memory's version when it was considered or last summarized.",
        ),
        sa.Column(
            "summarized",
            sa.Boolean(),
            server_default=sa.text("false"),
            nullable=False,
            comment="Whether the cluster's current summary was written from it.",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id", "memory_id"],
            [f"{schema}.memories.tenant_id", f"{schema}.memories.id"],
            name=op.f(f"fk_{MEMBERS}_tenant_id_memories"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id", "assembly_id"],
            [f"{schema}.{CLUSTERS}.tenant_id", f"{schema}.{CLUSTERS}.assembly_id"],
            name=op.f(f"fk_{MEMBERS}_tenant_id_{CLUSTERS}"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "memory_id", name=op.f(f"pk_{MEMBERS}")),
        schema=schema,
        comment="Memories svc.maintenance.consolidate has considered, one row each (the key "
        "keeps a memory in at most one cluster); a memory with no row is new to it.",
    )
    op.create_index(
        "ix_consolidation_members_assembly",
        MEMBERS,
        ["tenant_id", "assembly_id"],
        schema=schema,
    )
    for table in (CLUSTERS, MEMBERS):
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
    op.drop_table(MEMBERS, schema=schema)
    op.drop_table(CLUSTERS, schema=schema)
