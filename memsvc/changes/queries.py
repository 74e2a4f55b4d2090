"""SQL of :class:`memsvc.changes.feed.ChangeFeed`.

The feed is the union of two ledgers, ``memory_events`` (source 0) and
``entity_events`` (source 1), in ``(change_key, source, event_id)`` order.
``change_key`` is the writing transaction's id (xid8), raised to the key of
the row's previous write where a writer waited for a row lock.

Only events whose key is below the watermark are read: every transaction
with an id below it has ended (or can write no event of this database), so
the set of events under that bound is final, and no event can ever commit
behind a position the feed has passed. The plain watermark is the snapshot's
xmin, the oldest transaction running anywhere on the server; the refined one
(:data:`REFINED_WATERMARK`) leaves out transactions that cannot write these
ledgers. Keys cross the wire as text (Python ints).
"""

from __future__ import annotations

# Sources, in feed order when two events share a change key.
MEMORY_SOURCE = 0
ENTITY_SOURCE = 1
SOURCES = {"memory_events": MEMORY_SOURCE, "entity_events": ENTITY_SOURCE}

HORIZON_KEY = "change_feed_horizon"
EPOCH_KEY = "change_feed_epoch"

WATERMARK = "pg_snapshot_xmin(pg_current_snapshot())"

# Over a CTE ``snap`` holding ``pg_current_snapshot()`` as ``s``.
PLAIN_WATERMARK = "pg_snapshot_xmin(snap.s)"

# Running transactions that can write no event of this database: those of
# other databases (PostgreSQL has no cross-database writes), and prepared
# transactions of any database holding no lock on either ledger (all they
# can still do is end). Reading pg_stat_activity costs more than the rest of
# a read, so the feed uses this only once the plain watermark has stalled.
_UNRELATED_TRANSACTIONS = """
    SELECT a.backend_xid FROM pg_stat_activity AS a
    WHERE a.backend_xid IS NOT NULL
      AND a.datid <> (SELECT oid FROM pg_database WHERE datname = current_database())
    UNION ALL
    SELECT p.transaction FROM pg_prepared_xacts AS p
    WHERE p.database <> current_database()
       OR NOT EXISTS (
           SELECT 1 FROM pg_locks AS t
           JOIN pg_locks AS r ON r.virtualtransaction = t.virtualtransaction AND r.pid IS NULL
           WHERE t.locktype = 'transactionid' AND t.transactionid = p.transaction
             AND t.pid IS NULL AND r.locktype = 'relation'
             AND r.relation IN ('{schema}.memory_events'::regclass,
                                '{schema}.entity_events'::regclass))"""

# The oldest running transaction that may still write an event (else the
# snapshot's xmax: every id below it has ended).
REFINED_WATERMARK = """coalesce(
    (SELECT min(x) FROM pg_snapshot_xip(snap.s) AS x
     WHERE xid(x) NOT IN ({unrelated})),
    pg_snapshot_xmax(snap.s))"""


def refined_watermark(schema: str) -> str:
    """:data:`REFINED_WATERMARK` for ``schema``'s ledgers."""
    return REFINED_WATERMARK.format(unrelated=_UNRELATED_TRANSACTIONS.format(schema=schema))

_MEMORY_VALUES = """CASE WHEN e.kind IN ('created', 'updated', 'superseded', 'invalidated')
    THEN coalesce(
        (SELECT jsonb_build_object('content', m.content, 'metadata', m.metadata,
                'importance', m.importance, 'key', m.key, 'expires_at', m.expires_at,
                'valid_from', coalesce(m.valid_from, m.created_at), 'valid_to', m.valid_to,
                'supersedes', to_jsonb(m.supersedes), 'superseded_by', m.superseded_by)
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


def read_batch(
    schema: str, scope_sql: str, *, with_values: bool, limit_param: str, refined: bool = False
) -> str:
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
    had not read yet. ``refined`` uses :data:`REFINED_WATERMARK` (the plain
    one is returned too, as ``snapshot_xmin``). ``epoch`` and
    ``system_identifier`` tell whether the database is still in the epoch
    the feed started in (see :mod:`memsvc.changes.epochs`).
    """
    memory_values = _MEMORY_VALUES.format(schema=schema) if with_values else "NULL::jsonb"
    entity_values = _ENTITY_VALUES.format(schema=schema) if with_values else "NULL::jsonb"
    watermark = refined_watermark(schema) if refined else PLAIN_WATERMARK
    return f"""
WITH snap AS MATERIALIZED (SELECT pg_current_snapshot() AS s),
w AS MATERIALIZED (SELECT {watermark} AS xmin, {PLAIN_WATERMARK} AS snapshot_xmin FROM snap),
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
       (SELECT snapshot_xmin FROM w)::text AS snapshot_xmin,
       (SELECT value FROM {schema}.schema_info WHERE key = '{HORIZON_KEY}') AS horizon,
       (SELECT value FROM {schema}.schema_info WHERE key = '{EPOCH_KEY}') AS epoch,
       (SELECT system_identifier::text FROM pg_control_system()) AS system_identifier,
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


def refined_watermark_now(schema: str) -> str:
    """The current refined watermark (text), where a feed started ``since="now"`` begins."""
    return f"""
WITH snap AS MATERIALIZED (SELECT pg_current_snapshot() AS s)
SELECT ({refined_watermark(schema)})::text FROM snap"""


def current_epoch(schema: str) -> str:
    """The feed's current epoch (JSON text), started first if the database moved cluster.

    See migration 0023 for what starting one does.
    """
    return f"SELECT {schema}.change_feed_epoch()"


def recorded_epoch(schema: str) -> str:
    """The recorded epoch (JSON text or NULL) and the live cluster's system identifier."""
    return f"""
SELECT (SELECT value FROM {schema}.schema_info WHERE key = '{EPOCH_KEY}') AS recorded,
       (SELECT system_identifier::text FROM pg_control_system()) AS system_identifier"""


def first_since(schema: str) -> str:
    """The first event, in feed order, whose transaction started at or after ``$1``.

    Found among the events since ``$1`` (the ``at`` indexes), then ordered:
    walking the feed from its start to the first recent one would read
    everything older. Also returns the watermark and the gc horizon.
    """
    arms = []
    for source, table in ((MEMORY_SOURCE, "memory_events"), (ENTITY_SOURCE, "entity_events")):
        arms.append(f"""
    (SELECT change_key, {source} AS source, event_id
     FROM (SELECT change_key, event_id FROM {schema}.{table} WHERE at >= $1 OFFSET 0) AS recent
     ORDER BY change_key, event_id LIMIT 1)""")
    union = "UNION ALL".join(arms)
    return f"""
WITH snap AS MATERIALIZED (SELECT pg_current_snapshot() AS s)
SELECT first.change_key::text AS change_key, first.source, first.event_id,
       ({refined_watermark(schema)})::text AS watermark,
       (SELECT value FROM {schema}.schema_info WHERE key = '{HORIZON_KEY}') AS horizon
FROM snap
LEFT JOIN (SELECT * FROM ({union}) AS firsts ORDER BY 1, 2, 3 LIMIT 1) AS first ON true"""


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


def watermark_holder(schema: str) -> str:
    """What holds the (refined) watermark back, if anything.

    The transaction whose id is the watermark: its session (the leader, for
    a parallel query) from pg_stat_activity, or its prepared transaction;
    how long it has run (``held_for_s``); and how many committed events wait
    behind it (counted up to ``$1``). ``held`` is false when no running
    transaction holds the watermark.
    """
    return f"""
WITH snap AS MATERIALIZED (SELECT pg_current_snapshot() AS s),
w AS MATERIALIZED (SELECT {refined_watermark(schema)} AS xmin, pg_snapshot_xmax(snap.s) AS xmax
                   FROM snap)
SELECT w.xmin::text AS watermark, w.xmin < w.xmax AS held,
       a.pid, a.datname, a.usename, a.application_name, a.state, a.xact_start,
       left(a.query, 200) AS query,
       p.gid, p.prepared, p.owner AS prepared_by, p.database AS prepared_in,
       EXTRACT(EPOCH FROM clock_timestamp() - coalesce(a.xact_start, p.prepared))::float8
           AS held_for_s,
       (SELECT count(*) FROM (
            (SELECT 1 FROM {schema}.memory_events WHERE change_key >= w.xmin LIMIT $1)
            UNION ALL
            (SELECT 1 FROM {schema}.entity_events WHERE change_key >= w.xmin LIMIT $1)) AS e
       ) AS waiting
FROM w
LEFT JOIN LATERAL (
    SELECT * FROM pg_stat_activity AS s
    WHERE w.xmin < w.xmax AND s.backend_xid = xid(w.xmin)
    ORDER BY s.leader_pid IS NOT NULL AND s.leader_pid <> s.pid, s.pid LIMIT 1
) AS a ON true
LEFT JOIN pg_prepared_xacts AS p ON w.xmin < w.xmax AND p.transaction = xid(w.xmin)"""
