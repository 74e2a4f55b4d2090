"""SQL of :class:`memsvc.repositories.changes.ChangeFeed`.

The feed is the union of two ledgers, ``memory_events`` (source 0) and
``entity_events`` (source 1), in ``(change_key, source, event_id)`` order.
``change_key`` is the writing transaction's id (xid8), raised to the key of
the row's previous write where a writer waited for a row lock.

Only events whose key is below ``pg_snapshot_xmin(pg_current_snapshot())``
are read: every transaction with an id below it has ended, so the set of
events under that bound is final, and no event can ever commit behind a
position the feed has passed. Keys cross the wire as text (Python ints).
"""

from __future__ import annotations

# Sources, in feed order when two events share a change key.
MEMORY_SOURCE = 0
ENTITY_SOURCE = 1
SOURCES = {"memory_events": MEMORY_SOURCE, "entity_events": ENTITY_SOURCE}

HORIZON_KEY = "change_feed_horizon"

WATERMARK = "pg_snapshot_xmin(pg_current_snapshot())"

_MEMORY_VALUES = """CASE WHEN e.kind IN ('created', 'updated') THEN coalesce(
        (SELECT jsonb_build_object('content', m.content, 'metadata', m.metadata,
                'importance', m.importance, 'key', m.key, 'expires_at', m.expires_at)
         FROM {schema}.memories AS m
         WHERE m.tenant_id = e.tenant_id AND m.id = e.memory_id AND m.version = e.version),
        (SELECT n.prior - 'version' - 'scope' FROM {schema}.memory_events AS n
         WHERE n.tenant_id = e.tenant_id AND n.memory_id = e.memory_id
           AND n.event_id > e.event_id AND (n.prior->>'version')::int = e.version
         ORDER BY n.event_id LIMIT 1)) END"""

_ENTITY_VALUES = """CASE WHEN e.kind = 'deleted' THEN NULL
        WHEN e.entity = 'assembly' THEN (
            SELECT jsonb_build_object('name', a.name, 'description', a.description,
                   'metadata', a.metadata, 'member_count', a.member_count)
            FROM {schema}.assemblies AS a
            WHERE a.tenant_id = e.tenant_id AND a.id = e.entity_id AND a.version = e.version)
        ELSE (
            SELECT jsonb_build_object('description', c.description, 'data', c.data,
                   'size_bytes', c.size_bytes)
            FROM {schema}.session_checkpoints AS c
            WHERE c.tenant_id = e.tenant_id AND c.id = e.entity_id) END"""


def read_batch(schema: str, scope_sql: str, *, with_values: bool, limit_param: str) -> str:
    """The next events after a position, below the watermark, in feed order.

    ``$1`` is the position's change key (text); ``$2`` / ``$3`` the last
    event id already passed in memory_events / entity_events at that key
    (the caller derives them from the cursor's source). ``scope_sql`` is a
    scope predicate on alias ``e`` (``true`` for every scope). Also returns
    the watermark, and whether events of the scope at or above it exist
    (held back behind a transaction still running; the range scan covers
    only events not yet deliverable), so the caller knows to look again
    soon even if no notification comes; and the gc horizon, read in the same
    snapshot as the events, so a consumer can tell when gc removed events it
    had not read yet.
    """
    memory_values = _MEMORY_VALUES.format(schema=schema) if with_values else "NULL::jsonb"
    entity_values = _ENTITY_VALUES.format(schema=schema) if with_values else "NULL::jsonb"
    return f"""
WITH w AS MATERIALIZED (SELECT {WATERMARK} AS xmin),
batch AS (
    (SELECT e.change_key, {MEMORY_SOURCE} AS source, e.event_id, 'memory' AS entity,
            e.memory_id AS entity_id, e.kind, e.version, e.at,
            e.tenant_id, e.project_id, e.agent_id, e.session_id,
            {memory_values} AS values
     FROM {schema}.memory_events AS e
     WHERE (e.change_key, e.event_id) > ($1::text::xid8, $2::bigint)
       AND e.change_key < (SELECT xmin FROM w) AND {scope_sql}
     ORDER BY e.change_key, e.event_id
     LIMIT {limit_param})
    UNION ALL
    (SELECT e.change_key, {ENTITY_SOURCE}, e.event_id, e.entity, e.entity_id, e.kind,
            e.version, e.at, e.tenant_id, e.project_id, e.agent_id, e.session_id,
            {entity_values}
     FROM {schema}.entity_events AS e
     WHERE (e.change_key, e.event_id) > ($1::text::xid8, $3::bigint)
       AND e.change_key < (SELECT xmin FROM w) AND {scope_sql}
     ORDER BY e.change_key, e.event_id
     LIMIT {limit_param})
)
SELECT b.change_key::text AS change_key, b.source, b.event_id, b.entity, b.entity_id, b.kind,
       b.version, b.at, b.tenant_id, b.project_id, b.agent_id, b.session_id, b.values,
       (SELECT xmin FROM w)::text AS watermark,
       (SELECT value FROM {schema}.schema_info WHERE key = '{HORIZON_KEY}') AS horizon,
       -- The first event after the position at or above the watermark
       -- (held back), found by an ordered range scan of the change key
       -- index: as EXISTS, the generic plan PostgreSQL settles on for this
       -- prepared statement scanned the whole table, a cost that grew with
       -- the ledger and was paid on every read.
       ((SELECT e.change_key FROM {schema}.memory_events AS e
         WHERE (e.change_key, e.event_id) > ($1::text::xid8, $2::bigint)
           AND e.change_key >= (SELECT xmin FROM w) AND {scope_sql}
         ORDER BY e.change_key, e.event_id LIMIT 1) IS NOT NULL
        OR (SELECT e.change_key FROM {schema}.entity_events AS e
            WHERE (e.change_key, e.event_id) > ($1::text::xid8, $3::bigint)
              AND e.change_key >= (SELECT xmin FROM w) AND {scope_sql}
            ORDER BY e.change_key, e.event_id LIMIT 1) IS NOT NULL) AS held_back
FROM (SELECT 1) AS one
LEFT JOIN (SELECT * FROM batch ORDER BY change_key, source, event_id LIMIT {limit_param}) AS b
    ON true
ORDER BY b.change_key, b.source, b.event_id"""


def watermark() -> str:
    """The current watermark (text): every event below it has committed or never will."""
    return f"SELECT {WATERMARK}::text"


def horizon(schema: str) -> str:
    """The newest position gc removed events up to (a cursor text), if any."""
    return f"SELECT value FROM {schema}.schema_info WHERE key = '{HORIZON_KEY}'"


def seed_horizon(schema: str) -> str:
    """Create the horizon row (empty) if it does not exist yet."""
    return f"""
INSERT INTO {schema}.schema_info (key, value) VALUES ('{HORIZON_KEY}', '')
ON CONFLICT (key) DO NOTHING"""


def lock_horizon(schema: str) -> str:
    """Lock the horizon row, so gc runs raise it one at a time.

    A statement of its own after :func:`seed_horizon`: a SELECT cannot see,
    hence cannot lock, a row its own statement's CTE inserts.
    """
    return f"SELECT value FROM {schema}.schema_info WHERE key = '{HORIZON_KEY}' FOR UPDATE"


def set_horizon(schema: str) -> str:
    """Record a new horizon (``$1``, a cursor text)."""
    return f"UPDATE {schema}.schema_info SET value = $1 WHERE key = '{HORIZON_KEY}'"


def feed_head(schema: str) -> str:
    """The first ``$4`` events after a position (``$1``-``$3`` as in :func:`read_batch`),
    below the watermark, in feed order: gc removes a prefix of the feed."""
    arms = []
    for source, table, bound in (
        (MEMORY_SOURCE, "memory_events", "$2"),
        (ENTITY_SOURCE, "entity_events", "$3"),
    ):
        arms.append(f"""
    (SELECT change_key, {source} AS source, event_id, tenant_id, at FROM {schema}.{table}
     WHERE (change_key, event_id) > ($1::text::xid8, {bound}::bigint)
       AND change_key < {WATERMARK}
     ORDER BY change_key, event_id
     LIMIT $4)""")
    union = "UNION ALL".join(arms)
    return f"""
SELECT change_key::text AS change_key, source, event_id, tenant_id, at FROM ({union}
) AS head
ORDER BY head.change_key, source, event_id
LIMIT $4"""


def delete_events(schema: str, table: str) -> str:
    """Delete events given as tenant / event id arrays (``$1``, ``$2``)."""
    return f"""
DELETE FROM {schema}.{table} AS e USING unnest($1::text[], $2::bigint[]) AS d(tenant_id, event_id)
WHERE e.tenant_id = d.tenant_id AND e.event_id = d.event_id"""
