"""Comment every column of the operator views, so ``\\d+`` documents them all.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from memsvc.db.migrate import settings_for_migration

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCOPE_COMMENTS = {
    "tenant_id": "Tenant of the scope.",
    "project_id": "Project of the scope (NULL: above project level).",
    "agent_id": "Agent of the scope (NULL: above agent level).",
    "session_id": "Session of the scope (NULL: above session level).",
}

COLUMN_COMMENTS = {
    "scope_stats": {
        **SCOPE_COMMENTS,
        "memories": "Memories stored in exactly this scope, expired ones included.",
        "live_memories": "Memories not expired (no expires_at, or one in the future).",
        "expired_waiting_gc": "Memories past expires_at that gc has not deleted.",
        "keyed_memories": "Memories with a key (written with put).",
        "embedded_memories": "Memories with an embedding (searchable by vector).",
        "assemblies": "Assemblies in exactly this scope.",
        "checkpoints": "Session checkpoints in exactly this scope.",
        "checkpoint_bytes": "Total size of the checkpoints' data, in bytes.",
        "oldest": "Earliest created_at over the scope's rows.",
        "newest": "Latest updated_at / created_at over the scope's rows.",
    },
    "recent_activity": {
        "at": "When the event happened.",
        "kind": "created, updated or deleted.",
        "tenant_id": "Tenant of the memory.",
        "project_id": "Project of the memory (from the prior values once deleted).",
        "agent_id": "Agent of the memory (from the prior values once deleted).",
        "session_id": "Session of the memory (from the prior values once deleted).",
        "memory_id": "The memory the event is about.",
        "version": "The memory's version after the event.",
        "content_preview": "First 80 characters of the content.",
        "event_id": "Order of the events (newest first in this view).",
    },
}

# What 0004 commented; downgrading restores exactly that.
PREVIOUS = {
    ("scope_stats", "expired_waiting_gc"): "Memories past expires_at that gc has not deleted.",
    ("scope_stats", "newest"): "Latest updated_at / created_at over the scope's rows.",
    ("recent_activity", "content_preview"): "First 80 characters of the content.",
    ("recent_activity", "kind"): "created, updated or deleted.",
}


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def upgrade() -> None:
    schema = settings_for_migration().db_schema
    for view, columns in COLUMN_COMMENTS.items():
        for column, comment in columns.items():
            op.execute(f"COMMENT ON COLUMN {schema}.{view}.{column} IS {_literal(comment)}")


def downgrade() -> None:
    schema = settings_for_migration().db_schema
    for view, columns in COLUMN_COMMENTS.items():
        for column in columns:
            previous = PREVIOUS.get((view, column))
            value = "NULL" if previous is None else _literal(previous)
            op.execute(f"COMMENT ON COLUMN {schema}.{view}.{column} IS {value}")
