"""Change feed: the ledgers indexed by tenant, then feed order.

A consumer following a scope reads, on each wake-up, the events of its
tenant after its position. With ``ix_memory_events_change_key`` alone
PostgreSQL has two ways to find them: a range of that index filtered by
scope, or the tenant's rows through a tenant index filtered by position. It
took the second whenever the tenant looked selective (a ledger not yet
analyzed; a tenant among several, for the custom plans of the first reads),
and then every read went through all of the tenant's history: the cost of a
read grew with the ledger, not with what was new.
``(tenant_id, change_key, event_id)`` serves both conditions and the order
at once, so a read touches only the events after its position, whatever the
statistics say. Feeds over every tenant (and gc) keep using the change key
index.

Building the indexes blocks writes to the two ledgers while it runs
(seconds per million events).

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from memsvc.db.migrate import settings_for_migration

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEXES = {
    "memory_events": "ix_memory_events_tenant_change_key",
    "entity_events": "ix_entity_events_tenant_change_key",
}


def upgrade() -> None:
    schema = settings_for_migration().db_schema
    for table, index in INDEXES.items():
        op.create_index(index, table, ["tenant_id", "change_key", "event_id"], schema=schema)


def downgrade() -> None:
    schema = settings_for_migration().db_schema
    for table, index in INDEXES.items():
        op.drop_index(index, table_name=table, schema=schema)
