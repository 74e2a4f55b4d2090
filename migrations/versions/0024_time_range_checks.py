"""Stored times within what Python can read: CHECK constraints on every time column.

A time outside 0001-01-02 .. 9999-12-30 UTC (PostgreSQL stores up to year
294276, and infinity) cannot be read into a Python datetime, so one such row
made every read meeting it fail (a TTL of thousands of years did it). memsvc
now refuses such values before writing; these constraints refuse them from
anywhere else too (imports, scripts, psql). The LangGraph store's
``ttl_minutes`` is bounded to 365,000 days, as memsvc's TTLs are.

Each constraint is added ``NOT VALID`` (no scan under the exclusive lock
the migration's transaction holds to its end) and validated at once on an
empty table. On a table with rows it stays ``NOT VALID`` (new rows are
checked all the same): ``memsvc doctor`` reports it as a warning, and
``memsvc doctor --repair`` brings rows out of range into range and validates
it without blocking writes.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from memsvc.db.migrate import settings_for_migration

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen here: later revisions change constraints with revisions of their own.
TIME_COLUMNS = {
    "memories": ("created_at", "updated_at", "expires_at", "last_accessed_at"),
    "memory_events": ("at", "committed_at"),
    "entity_events": ("at",),
    "assemblies": ("created_at", "updated_at"),
    "assembly_members": ("added_at",),
    "session_checkpoints": ("created_at",),
    "langgraph_checkpoints": ("created_at",),
    "langgraph_store_items": ("created_at", "updated_at", "expires_at"),
}
IN_RANGE = "{column} BETWEEN '0001-01-02 00:00:00+00' AND '9999-12-30 23:59:59.999999+00'"
TTL_MINUTES = "ttl_minutes > 0 AND ttl_minutes <= 525600000"


def _constraints() -> list[tuple[str, str, str]]:
    found = [
        (table, f"ck_{table}_{column}_range", IN_RANGE.format(column=column))
        for table, columns in TIME_COLUMNS.items()
        for column in columns
    ]
    found.append(("langgraph_store_items", "ck_langgraph_store_items_ttl_minutes_range",
                  TTL_MINUTES))
    return found


def upgrade() -> None:
    schema = settings_for_migration().db_schema
    for table, name, condition in _constraints():
        op.execute(
            f"ALTER TABLE {schema}.{table} ADD CONSTRAINT {name} CHECK ({condition}) NOT VALID"
        )
        # The migration's transaction holds ADD CONSTRAINT's exclusive lock to
        # its end: scanning a populated table here would block its readers
        # and writers meanwhile. An empty table is validated at once; any
        # other stays NOT VALID (new rows are checked all the same) until
        # `memsvc doctor --repair` validates it online.
        op.execute(
            f"""DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM {schema}.{table}) THEN
        ALTER TABLE {schema}.{table} VALIDATE CONSTRAINT {name};
    END IF;
END $$"""
        )


def downgrade() -> None:
    schema = settings_for_migration().db_schema
    for table, name, _ in reversed(_constraints()):
        op.execute(f"ALTER TABLE {schema}.{table} DROP CONSTRAINT {name}")
