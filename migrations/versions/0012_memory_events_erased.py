"""History: an ``erased`` event kind, the content-free tombstone ``svc.erase`` leaves.

Erasure replaces a memory's whole history with one ``erased`` event (no prior
values), so change feeds and audits still see that something was erased, and
when, without keeping any of what was said.

Revision ID: 0012
Revises: 0010
Create Date: 2026-11-23
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

from memsvc.db.migrate import settings_for_migration

revision: str = "0012"
# 0011 (change feed) is built alongside: re-chain to it on merge. The kinds are read
# from the constraint, so kinds an earlier revision added are kept.
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CONSTRAINT = "ck_memory_events_kind"
BASE_KINDS = ("created", "updated", "deleted")

# The constraint's current definition: a revision before this one may have
# added kinds of its own, which must survive the ALTER.
CURRENT_DEFINITION = """
SELECT pg_get_constraintdef(c.oid) FROM pg_constraint AS c
JOIN pg_class AS t ON t.oid = c.conrelid
JOIN pg_namespace AS n ON n.oid = t.relnamespace
WHERE n.nspname = :schema AND t.relname = 'memory_events' AND c.conname = :name"""


def _current_kinds(schema: str) -> list[str]:
    if context.is_offline_mode():
        return list(BASE_KINDS)
    definition = (
        op.get_bind()
        .execute(sa.text(CURRENT_DEFINITION), {"schema": schema, "name": CONSTRAINT})
        .scalar()
    )
    return re.findall(r"'([a-z_]+)'", definition or "") or list(BASE_KINDS)


def _replace(kinds: list[str], kind_comment: str, prior_comment: str) -> None:
    schema = settings_for_migration().db_schema
    table = f"{schema}.memory_events"
    listed = ", ".join(f"'{kind}'" for kind in kinds)
    op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {CONSTRAINT}")
    op.execute(f"ALTER TABLE {table} ADD CONSTRAINT {CONSTRAINT} CHECK (kind IN ({listed}))")
    op.execute(f"COMMENT ON COLUMN {table}.kind IS '{kind_comment}'")
    op.execute(f"COMMENT ON COLUMN {table}.prior IS '{prior_comment}'")


def upgrade() -> None:
    kinds = _current_kinds(settings_for_migration().db_schema)
    _replace(
        [*kinds, *(["erased"] if "erased" not in kinds else [])],
        "created, updated, deleted or erased.",
        "The values before the change (NULL for created and erased).",
    )


def downgrade() -> None:
    # Tombstones cannot be turned back into history: they go with the kind.
    schema = settings_for_migration().db_schema
    op.execute(f"DELETE FROM {schema}.memory_events WHERE kind = 'erased'")
    _replace(
        [kind for kind in _current_kinds(schema) if kind != "erased"],
        "created, updated or deleted.",
        "The values before the change (NULL for created).",
    )
