"""Row-level security policies on every tenant table.

The policies admit only rows whose tenant_id equals the transaction's
``memsvc.tenant`` setting, which memsvc sets with set_config(..., true) at the
start of each transaction when ``Settings.row_level_security`` is on. They
are enabled and forced (so they bind the table owner too) when the setting is
on at migration time; otherwise they are created but inactive. The views run
with the caller's rights (security_invoker), so they cannot read past the
policies either.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from memsvc.db.migrate import settings_for_migration

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TENANT_TABLES = (
    "memories",
    "memory_events",
    "assemblies",
    "assembly_members",
    "session_checkpoints",
)
VIEWS = ("scope_stats", "recent_activity")


def upgrade() -> None:
    settings = settings_for_migration()
    schema = settings.db_schema
    for table in TENANT_TABLES:
        op.execute(
            f"CREATE POLICY tenant_isolation ON {schema}.{table} "
            "USING (tenant_id = current_setting('memsvc.tenant', true)) "
            "WITH CHECK (tenant_id = current_setting('memsvc.tenant', true))"
        )
        if settings.row_level_security:
            op.execute(f"ALTER TABLE {schema}.{table} ENABLE ROW LEVEL SECURITY")
            op.execute(f"ALTER TABLE {schema}.{table} FORCE ROW LEVEL SECURITY")
    for view in VIEWS:
        op.execute(f"ALTER VIEW {schema}.{view} SET (security_invoker = true)")


def downgrade() -> None:
    schema = settings_for_migration().db_schema
    for view in VIEWS:
        op.execute(f"ALTER VIEW {schema}.{view} RESET (security_invoker)")
    for table in TENANT_TABLES:
        op.execute(f"ALTER TABLE {schema}.{table} NO FORCE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {schema}.{table} DISABLE ROW LEVEL SECURITY")
        op.execute(f"DROP POLICY tenant_isolation ON {schema}.{table}")
