"""Views for operators: scope_stats and recent_activity.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from memsvc.db.migrate import settings_for_migration

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCOPE = "tenant_id, project_id, agent_id, session_id"

# Rows of every table, grouped by exact scope. GROUP BY treats NULL levels
# as equal, which is what "the same scope" means here.
SCOPE_STATS = """
CREATE VIEW {schema}.scope_stats AS
SELECT {scope},
       sum(memories)::bigint AS memories,
       sum(live)::bigint AS live_memories,
       sum(expired)::bigint AS expired_waiting_gc,
       sum(keyed)::bigint AS keyed_memories,
       sum(embedded)::bigint AS embedded_memories,
       sum(assemblies)::bigint AS assemblies,
       sum(checkpoints)::bigint AS checkpoints,
       sum(checkpoint_bytes)::bigint AS checkpoint_bytes,
       min(oldest) AS oldest,
       max(newest) AS newest
FROM (
    SELECT {scope}, count(*) AS memories,
           count(*) FILTER (WHERE expires_at IS NULL OR expires_at > now()) AS live,
           count(*) FILTER (WHERE expires_at <= now()) AS expired,
           count(key) AS keyed, count(embedding) AS embedded,
           0 AS assemblies, 0 AS checkpoints, 0 AS checkpoint_bytes,
           min(created_at) AS oldest, max(updated_at) AS newest
    FROM {schema}.memories GROUP BY {scope}
    UNION ALL
    SELECT {scope}, 0, 0, 0, 0, 0, count(*), 0, 0, min(created_at), max(updated_at)
    FROM {schema}.assemblies GROUP BY {scope}
    UNION ALL
    SELECT {scope}, 0, 0, 0, 0, 0, 0, count(*), sum(size_bytes), min(created_at), max(created_at)
    FROM {schema}.session_checkpoints GROUP BY {scope}
) AS per_table
GROUP BY {scope}
"""

# The scope of a deleted memory is only in its event's prior values.
RECENT_ACTIVITY = """
CREATE VIEW {schema}.recent_activity AS
SELECT e.at, e.kind, e.tenant_id,
       CASE WHEN m.id IS NULL THEN e.prior -> 'scope' ->> 1 ELSE m.project_id END AS project_id,
       CASE WHEN m.id IS NULL THEN e.prior -> 'scope' ->> 2 ELSE m.agent_id END AS agent_id,
       CASE WHEN m.id IS NULL THEN e.prior -> 'scope' ->> 3 ELSE m.session_id END AS session_id,
       e.memory_id, e.version,
       left(coalesce(m.content, e.prior ->> 'content'), 80) AS content_preview,
       e.event_id
FROM {schema}.memory_events AS e
LEFT JOIN {schema}.memories AS m ON m.tenant_id = e.tenant_id AND m.id = e.memory_id
ORDER BY e.event_id DESC
"""

COMMENTS = {
    "scope_stats": (
        "Rows per exact scope (tenant/project/agent/session): memories (live, expired waiting "
        "for gc, keyed, with embedding), assemblies, checkpoints and their bytes, oldest and "
        "newest change."
    ),
    "recent_activity": (
        "Memory events newest first, with the memory's scope and the first 80 characters of "
        "its content (from the prior values once deleted). Filter by tenant_id to read it "
        "through the primary key."
    ),
}

COLUMN_COMMENTS = {
    ("scope_stats", "expired_waiting_gc"): "Memories past expires_at that gc has not deleted.",
    ("scope_stats", "newest"): "Latest updated_at / created_at over the scope's rows.",
    ("recent_activity", "content_preview"): "First 80 characters of the content.",
    ("recent_activity", "kind"): "created, updated or deleted.",
}


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def upgrade() -> None:
    schema = settings_for_migration().db_schema
    op.execute(SCOPE_STATS.format(schema=schema, scope=SCOPE))
    op.execute(RECENT_ACTIVITY.format(schema=schema))
    for view, comment in COMMENTS.items():
        op.execute(f"COMMENT ON VIEW {schema}.{view} IS {_literal(comment)}")
    for (view, column), comment in COLUMN_COMMENTS.items():
        op.execute(f"COMMENT ON COLUMN {schema}.{view}.{column} IS {_literal(comment)}")


def downgrade() -> None:
    schema = settings_for_migration().db_schema
    op.execute(f"DROP VIEW IF EXISTS {schema}.recent_activity")
    op.execute(f"DROP VIEW IF EXISTS {schema}.scope_stats")
