"""History: an ``erased`` event kind, the content-free tombstone ``svc.erase`` leaves.

Erasure replaces a memory's whole history with one ``erased`` event (no prior
values), so change feeds and audits still see that something was erased, and
when, without keeping any of what was said.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from memsvc.db.migrate import settings_for_migration

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CONSTRAINT = "ck_memory_events_kind"
# The kinds 0001 allows; no revision between it and this one changes them.
BASE_KINDS = ("created", "updated", "deleted")


def _replace(kinds: Sequence[str], kind_comment: str, prior_comment: str) -> None:
    schema = settings_for_migration().db_schema
    table = f"{schema}.memory_events"
    listed = ", ".join(f"'{kind}'" for kind in kinds)
    op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {CONSTRAINT}")
    op.execute(f"ALTER TABLE {table} ADD CONSTRAINT {CONSTRAINT} CHECK (kind IN ({listed}))")
    op.execute(f"COMMENT ON COLUMN {table}.kind IS '{kind_comment}'")
    op.execute(f"COMMENT ON COLUMN {table}.prior IS '{prior_comment}'")


def upgrade() -> None:
    _replace(
        (*BASE_KINDS, "erased"),
        "created, updated, deleted or erased.",
        "The values before the change (NULL for created and erased).",
    )


def downgrade() -> None:
    # Tombstones cannot be turned back into history: they go with the kind.
    schema = settings_for_migration().db_schema
    op.execute(f"DELETE FROM {schema}.memory_events WHERE kind = 'erased'")
    _replace(
        BASE_KINDS,
        "created, updated or deleted.",
        "The values before the change (NULL for created).",
    )
