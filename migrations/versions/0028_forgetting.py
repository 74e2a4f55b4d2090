"""Forgetting: pinned memories, forgotten memories, and the half-life policies.

``memories.pinned`` (never forgotten) and ``memories.forgotten_at`` (when a
forget pass took the memory out of every read; NULL: not forgotten), with a
partial index gc reads the forgotten rows past their grace period through.

``memory_policies`` holds a half-life per tenant or scope: a memory's
strength is ``importance x 0.5 ^ (age / half_life)``, the half-life of the
most specific policy on its scope's path. One row per exact scope (NULL
levels compared as equal), tenant-leading keys and the same row-level
security policy as the other tenant tables.

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import DOUBLE_PRECISION

from memsvc.core.time_limits import in_range_sql
from memsvc.db.migrate import settings_for_migration
from memsvc.db.tables import (
    FORGOTTEN_AT_COMMENT,
    PINNED_COMMENT,
    POLICIES_COMMENT,
    SCOPE_COMMENTS,
)

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "memory_policies"


def upgrade() -> None:
    settings = settings_for_migration()
    schema = settings.db_schema
    op.add_column(
        "memories",
        sa.Column(
            "pinned",
            sa.Boolean(),
            server_default=sa.text("false"),
            nullable=False,
            comment=PINNED_COMMENT,
        ),
        schema=schema,
    )
    op.add_column(
        "memories",
        sa.Column(
            "forgotten_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment=FORGOTTEN_AT_COMMENT,
        ),
        schema=schema,
    )
    op.create_check_constraint(
        op.f("ck_memories_forgotten_at_range"),
        "memories",
        in_range_sql("forgotten_at"),
        schema=schema,
    )
    op.create_index(
        "ix_memories_forgotten_at",
        "memories",
        ["forgotten_at"],
        schema=schema,
        postgresql_where=sa.text("forgotten_at IS NOT NULL"),
    )
    op.create_table(
        TABLE,
        sa.Column("tenant_id", sa.Text(), nullable=False, comment=SCOPE_COMMENTS["tenant_id"]),
        sa.Column("project_id", sa.Text(), nullable=True, comment=SCOPE_COMMENTS["project_id"]),
        sa.Column("agent_id", sa.Text(), nullable=True, comment=SCOPE_COMMENTS["agent_id"]),
        sa.Column("session_id", sa.Text(), nullable=True, comment=SCOPE_COMMENTS["session_id"]),
        sa.Column("id", sa.UUID(), nullable=False, comment="Policy id."),
        sa.Column(
            "half_life_s",
            DOUBLE_PRECISION(),
            nullable=False,
            comment="Half-life of the strength of the scope's memories, in seconds.",
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="When the policy was last set.",
        ),
        sa.CheckConstraint(
            in_range_sql("updated_at"), name=op.f(f"ck_{TABLE}_updated_at_range")
        ),
        sa.CheckConstraint("half_life_s > 0", name=op.f(f"ck_{TABLE}_half_life_positive")),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f(f"pk_{TABLE}")),
        schema=schema,
        comment=POLICIES_COMMENT,
    )
    op.create_index(
        "uq_memory_policies_scope",
        TABLE,
        ["tenant_id", "project_id", "agent_id", "session_id"],
        unique=True,
        schema=schema,
        postgresql_nulls_not_distinct=True,
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
    op.drop_index("ix_memories_forgotten_at", table_name="memories", schema=schema)
    op.drop_column("memories", "forgotten_at", schema=schema)
    op.drop_column("memories", "pinned", schema=schema)
