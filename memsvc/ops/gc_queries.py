"""SQL of :mod:`memsvc.ops.gc`.

Every batch locks its rows ``FOR UPDATE SKIP LOCKED``: several gc workers
split the work between them instead of queueing on each other, and rows a
writer holds are left for the next run instead of blocking it.
"""

from __future__ import annotations

from memsvc.memories.asof_queries import HORIZON_KEY as ASOF_HORIZON_KEY

SCOPE = "tenant_id, project_id, agent_id, session_id"


def lock_expired(schema: str, tenant_filter: bool = False) -> str:
    """Lock the next batch (``$1`` rows) of expired memories, oldest expiry first.

    ``expires_at <= now()`` is the complement of the live condition the
    repositories read with, and is served by the partial index on
    ``expires_at``. Under READ COMMITTED a row changed meanwhile is
    re-checked against it before it is locked: one whose TTL was just
    extended is not taken. ``tenant_filter``: of tenant ``$2`` only (Citus
    locks rows only in a statement routed to one shard).
    """
    tenant = "AND tenant_id = $2" if tenant_filter else ""
    return f"""
SELECT tenant_id, id FROM {schema}.memories
WHERE expires_at IS NOT NULL AND expires_at <= now() {tenant}
ORDER BY expires_at
LIMIT $1
FOR UPDATE SKIP LOCKED"""


def expired_tenants(schema: str) -> str:
    """Up to ``$1`` tenants holding expired memories (no lock: Citus, before locking per tenant)."""
    return f"""
SELECT DISTINCT tenant_id FROM {schema}.memories
WHERE expires_at IS NOT NULL AND expires_at <= now()
LIMIT $1"""


def expired_store_tenants(schema: str) -> str:
    """Up to ``$1`` tenants holding expired LangGraph store items (as :func:`expired_tenants`)."""
    return f"""
SELECT DISTINCT tenant_id FROM {schema}.langgraph_store_items
WHERE expires_at IS NOT NULL AND expires_at <= now()
LIMIT $1"""


def uncommitted_tenants(schema: str) -> str:
    """Up to ``$1`` tenants with history events whose commit time is not copied yet."""
    return f"""
SELECT DISTINCT tenant_id FROM {schema}.memory_events WHERE committed_at IS NULL LIMIT $1"""


def sessions_over_retention(schema: str) -> str:
    """Sessions holding more than ``$1`` checkpoints (at most ``$2`` of them)."""
    return f"""
SELECT {SCOPE} FROM {schema}.session_checkpoints
GROUP BY {SCOPE}
HAVING count(*) > $1
LIMIT $2"""


def idle_sessions(schema: str) -> str:
    """Sessions where nothing changed or was read since ``$1`` (at most ``$2`` of them).

    Activity is the newest ``updated_at`` / ``last_accessed_at`` of the
    session's memories, ``updated_at`` of its assemblies and ``created_at``
    of its checkpoints.
    """
    return f"""
WITH activity AS (
    SELECT {SCOPE}, greatest(max(updated_at), max(last_accessed_at)) AS last
    FROM {schema}.memories WHERE session_id IS NOT NULL GROUP BY {SCOPE}
    UNION ALL
    SELECT {SCOPE}, max(updated_at) FROM {schema}.assemblies
    WHERE session_id IS NOT NULL GROUP BY {SCOPE}
    UNION ALL
    SELECT {SCOPE}, max(created_at) FROM {schema}.session_checkpoints GROUP BY {SCOPE}
)
SELECT {SCOPE} FROM activity
GROUP BY {SCOPE}
HAVING max(last) < $1
ORDER BY {SCOPE}
LIMIT $2"""


def lock_idle_memories(schema: str, scope_sql: str, cutoff: str, limit: str) -> str:
    """Lock a batch of a session's memories untouched since the cutoff.

    Each row is checked against the cutoff itself, so a memory written into
    the session while gc runs survives.
    """
    return f"""
SELECT tenant_id, id FROM {schema}.memories
WHERE {scope_sql} AND updated_at < {cutoff}
  AND (last_accessed_at IS NULL OR last_accessed_at < {cutoff})
ORDER BY tenant_id, id
LIMIT {limit}
FOR UPDATE SKIP LOCKED"""


def delete_idle_assemblies(schema: str, scope_sql: str, cutoff: str) -> str:
    """Delete a session's assemblies unchanged since the cutoff (members go with them)."""
    return f"""
WITH gone AS (
    DELETE FROM {schema}.assemblies WHERE {scope_sql} AND updated_at < {cutoff} RETURNING 1
)
SELECT count(*) FROM gone"""


def delete_idle_checkpoints(schema: str, scope_sql: str, cutoff: str) -> str:
    """Delete a session's checkpoints taken before the cutoff."""
    return f"""
WITH gone AS (
    DELETE FROM {schema}.session_checkpoints
    WHERE {scope_sql} AND created_at < {cutoff} RETURNING 1
)
SELECT count(*) FROM gone"""




def persist_commit_times(schema: str) -> str:
    """Copy the commit time of up to ``$1`` history events into ``committed_at``.

    Every event gc can see has committed, and PostgreSQL recorded its commit
    time before making it visible, so ``pg_xact_commit_timestamp(xmin)`` is
    known unless the event was written while ``track_commit_timestamp`` was
    off or the server has truncated it (frozen): then the transaction's start
    ``at`` is the best time left, and as-of reads already use it. The rows
    are locked SKIP LOCKED: an erasure rewriting an event (a new ``xmin``)
    waits for this batch rather than the other way round.
    """
    return f"""
WITH batch AS (
    SELECT tenant_id, event_id FROM {schema}.memory_events
    WHERE committed_at IS NULL
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), done AS (
    UPDATE {schema}.memory_events AS e
    SET committed_at = coalesce(pg_xact_commit_timestamp(e.xmin), e.at)
    FROM batch
    WHERE e.tenant_id = batch.tenant_id AND e.event_id = batch.event_id
    RETURNING 1
)
SELECT count(*) FROM done"""


def persist_tenant_commit_times(schema: str) -> str:
    """:func:`persist_commit_times` for tenant ``$2`` only, routed to one shard on Citus.

    The commit time is read in the batch's SELECT: Citus evaluates no
    VOLATILE function in an UPDATE's SET. ``xmin`` and the commit time are
    those of the node holding the row, where it was written.
    """
    return f"""
WITH batch AS (
    SELECT tenant_id, event_id, coalesce(pg_xact_commit_timestamp(xmin), at) AS committed
    FROM {schema}.memory_events
    WHERE tenant_id = $2 AND committed_at IS NULL
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), done AS (
    UPDATE {schema}.memory_events AS e SET committed_at = batch.committed
    FROM batch
    WHERE e.tenant_id = $2 AND e.tenant_id = batch.tenant_id AND e.event_id = batch.event_id
    RETURNING 1
)
SELECT count(*) FROM done"""


def delete_history_events(schema: str) -> str:
    """Delete memory events (tenant / event id arrays ``$1``, ``$2``) for the feed's retention,
    and raise the as-of history horizon to the newest commit time among them.

    As-of reads rebuild a past state from the events after it; once events are
    gone, a moment before the newest one removed can no longer be rebuilt, and
    as-of reads refuse it (``history_horizon`` in ``schema_info``). The commit
    time is the persisted one, else the server's (when it tracks them), else
    the transaction's start. (The deletion of a memory already expired carries
    its transaction's start instead of its commit: a horizon placed there
    admits, beyond the commit's, only moments at which that memory was
    expired, whose answers the removed event cannot change.)
    """
    return f"""
WITH gone AS (
    DELETE FROM {schema}.memory_events AS e
    USING unnest($1::text[], $2::bigint[]) AS d(tenant_id, event_id)
    WHERE e.tenant_id = d.tenant_id AND e.event_id = d.event_id
    RETURNING coalesce(
        e.committed_at,
        CASE WHEN current_setting('track_commit_timestamp')::bool
             THEN pg_xact_commit_timestamp(e.xmin) END,
        e.at
    ) AS committed
), newest AS (
    SELECT max(committed) AS t FROM gone
)
INSERT INTO {schema}.schema_info (key, value)
SELECT '{ASOF_HORIZON_KEY}', t::text FROM newest WHERE t IS NOT NULL
ON CONFLICT (key) DO UPDATE
SET value = greatest({schema}.schema_info.value::timestamptz, excluded.value::timestamptz)::text"""
