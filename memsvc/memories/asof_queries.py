"""SQL of as-of reads: memories as they were committed at a moment ``t``.

The state at ``t`` is rebuilt backwards from the present, so only history
*after* ``t`` is needed (history older than that may be gone):

- a memory with no event committed after ``t`` is as its current row says
  (and a memory with no row and no later event did not exist at ``t``);
- otherwise the first event committed after ``t`` tells: ``updated`` and
  ``deleted`` record in ``prior`` the values the memory held at ``t``;
  ``created`` means it did not exist yet; an ``erased`` event, or a ``prior``
  stripped by erasure, leaves nothing to show.

"Committed after ``t``" uses the commit time of the event's transaction:
``committed_at`` once gc has persisted it (or, for the deletion of a memory
already expired, the deleting transaction's start, written with the event:
the memory is hidden from that moment on either way), else the server's commit
timestamp of the row's ``xmin`` (``track_commit_timestamp``), else (an event
written while commit timestamps were off, or whose timestamp the server has
since truncated) its transaction's start time ``at``. The events of one
memory are serialised by its row lock, so their ``event_id`` order is their
commit order and the first one after ``t`` is found by ``event_id``.

Before reading, :data:`SETTLING` waits for transactions that committed at
or before ``t`` but are not visible yet (see there). Every read statement
then starts with a one-row guard: whether ``t`` lies after the read's
snapshot (the future), before the history horizon, or whether a transaction
the snapshot lists as running has meanwhile committed at or before ``t``
(the caller reads again).
"""

from __future__ import annotations

from memsvc.memories.queries import MEMORY_COLUMNS

# The latest moment history may have been cut at (ISO timestamp in
# schema_info): whoever deletes events (feed retention) records it there.
# No row: history is complete.
HORIZON_KEY = "history_horizon"

SHOW_TRACKING = "SELECT current_setting('track_commit_timestamp')::bool"

# Run before the read, with t as $1: is a transaction that committed at or
# before t still becoming visible? Its commit timestamp is recorded before
# the commit becomes visible (a WAL flush, a synchronous standby's answer
# later), and its xid stays in pg_stat_activity until it is visible. A
# transaction not listed here has either become visible (so the read's
# snapshot, taken after this statement, sees it) or had no xid yet (so it
# commits after t). The snapshot's own list of running transactions
# (``missed`` below) does not suffice: a transaction whose xid is past the
# snapshot's xmax is invisible without being listed there.
SETTLING = """
SELECT EXISTS (
    SELECT 1 FROM pg_stat_activity
    WHERE backend_xid IS NOT NULL AND pg_xact_commit_timestamp(backend_xid) <= $1
) AS settling, current_setting('transaction_isolation') = 'read committed' AS fresh_snapshot"""

# In a caller's transaction pg_stat_activity is read once and cached.
CLEAR_STATS_SNAPSHOT = "SELECT pg_stat_clear_snapshot()"

_PRIOR_SCOPE = ", ".join(
    f"l.prior->'scope'->>{i} AS {column}"
    for i, column in enumerate(("tenant_id", "project_id", "agent_id", "session_id"))
)


def _committed_after(t: str) -> str:
    # Persisted times are served by ix_memory_events_committed, the rest
    # (written since gc last ran) by the partial ix_memory_events_uncommitted.
    return (
        f"(e.committed_at > {t} OR (e.committed_at IS NULL "
        f"AND coalesce(pg_xact_commit_timestamp(e.xmin), e.at) > {t}))"
    )


def _guard(schema: str, t: str) -> str:
    # Under READ COMMITTED each statement takes a new snapshot; under
    # REPEATABLE READ / SERIALIZABLE the transaction's first one is used,
    # taken after transaction_timestamp().
    return f"""
guard AS (
    SELECT {t} > CASE WHEN current_setting('transaction_isolation') = 'read committed'
                      THEN statement_timestamp() ELSE transaction_timestamp() END AS future,
           {t} < coalesce((SELECT value::timestamptz FROM {schema}.schema_info
                           WHERE key = '{HORIZON_KEY}'), '-infinity') AS too_old,
           EXISTS (
               SELECT 1 FROM pg_snapshot_xip(pg_current_snapshot()) AS x(xid)
               -- xid(): the 32-bit id of a 64-bit one, whatever its epoch
               WHERE pg_xact_commit_timestamp(xid(x.xid)) <= {t}
           ) AS missed,
           (SELECT value FROM {schema}.schema_info WHERE key = '{HORIZON_KEY}') AS horizon
)"""


def _rows(
    schema: str, event_filter: str, row_filter: str, t: str, embedding: bool, tenant: str | None
) -> str:
    """The common table expressions ``guard``, ``later`` and ``asof`` (memories at ``t``).

    ``tenant``: the placeholder of the one tenant read, or None. With it
    every table the statement reads is filtered by that tenant, not only
    joined on it: Citus then routes the whole statement to the node holding
    the tenant's shards (it cannot plan its joins across shards).
    """
    events = f"{schema}.memory_events"
    same_tenant = "l.tenant_id" if tenant is None else tenant
    before_l = (
        f"FROM {events} AS p WHERE p.tenant_id = {same_tenant} AND p.memory_id = l.memory_id "
        "AND p.event_id < l.event_id"
    )
    current_embedding = "m.embedding" if embedding else "NULL"
    return f"""
WITH {_guard(schema, t).strip()}, later AS (
    -- Each memory's first event committed after t.
    SELECT DISTINCT ON (e.tenant_id, e.memory_id)
           e.tenant_id, e.memory_id, e.event_id, e.kind, e.prior, e.at
    FROM {events} AS e
    WHERE {event_filter} AND {_committed_after(t)}
    ORDER BY e.tenant_id, e.memory_id, e.event_id
), asof AS (
    SELECT m.tenant_id, m.project_id, m.agent_id, m.session_id, m.id, m.key, m.content,
           m.content_hash, m.metadata, {current_embedding} AS embedding, m.importance,
           m.version, m.created_at, m.updated_at, m.expires_at,
           m.valid_from, m.valid_to, m.supersedes, m.superseded_by
    FROM {schema}.memories AS m
    WHERE {row_filter}
      AND NOT EXISTS (
        SELECT 1 FROM later AS l WHERE l.tenant_id = m.tenant_id AND l.memory_id = m.id
    )
    UNION ALL
    SELECT {_PRIOR_SCOPE}, l.memory_id, l.prior->>'key', l.prior->>'content',
           'sha256:' || encode(sha256(convert_to(l.prior->>'content', 'UTF8')), 'hex'),
           l.prior->'metadata', NULL, (l.prior->>'importance')::real,
           (l.prior->>'version')::int,
           -- The row's timestamps were its events' (same transaction, same
           -- now()). Without those events (history cut by retention), the
           -- later event's time is the best bound left.
           coalesce((SELECT p.at {before_l} AND p.kind = 'created'
                     ORDER BY p.event_id DESC LIMIT 1), l.at),
           coalesce((SELECT p.at {before_l} ORDER BY p.event_id DESC LIMIT 1), l.at),
           (l.prior->>'expires_at')::timestamptz,
           -- Valid time: absent from events written before it (NULL: valid
           -- since creation, never superseded).
           (l.prior->>'valid_from')::timestamptz, (l.prior->>'valid_to')::timestamptz,
           CASE WHEN jsonb_typeof(l.prior->'supersedes') = 'array' THEN ARRAY(
               SELECT jsonb_array_elements_text(l.prior->'supersedes')::uuid) END,
           (l.prior->>'superseded_by')::uuid
    FROM later AS l
    WHERE l.kind IN ('updated', 'deleted', 'superseded', 'invalidated') AND l.prior IS NOT NULL
)"""


def tenants_of_ids(schema: str) -> str:
    """The tenants holding a row or an event of the memories ``$1`` (uuid[]), for Citus."""
    return f"""
SELECT tenant_id FROM {schema}.memories WHERE id = ANY($1::uuid[])
UNION
SELECT tenant_id FROM {schema}.memory_events WHERE memory_id = ANY($1::uuid[])
ORDER BY tenant_id"""


def _select(where: str, t: str) -> str:
    # Access statistics, forgetting and reinforcement are not history: an
    # as-of read shows none of them (a forgotten memory as it was stored).
    columns = (
        MEMORY_COLUMNS.replace("access_count", "0 AS access_count")
        .replace("last_accessed_at", "NULL::timestamptz AS last_accessed_at")
        .replace("pinned", "false AS pinned")
        .replace("forgotten_at", "NULL::timestamptz AS forgotten_at")
        .replace("reinforced_count", "0 AS reinforced_count")
        .replace("last_reinforced_at", "NULL::timestamptz AS last_reinforced_at")
        .replace("content_unique", "true AS content_unique")
    )
    return f"""
    SELECT {columns} FROM asof
    WHERE {where} AND (expires_at IS NULL OR expires_at > {t})"""


def by_ids(schema: str, tenant_param: str | None, embedding: bool = True) -> str:
    """Memories by id (``$1`` uuid[], ``$2`` t, optional tenant) as they were at t."""
    tenant = f" AND {{alias}}tenant_id = {tenant_param}" if tenant_param else ""
    ids = "{alias}id = ANY($1::uuid[])" + tenant
    rows, rebuilt = (ids.format(alias=alias) for alias in ("m.", ""))
    events = "e.memory_id = ANY($1::uuid[])" + tenant.format(alias="e.")
    return f"""{_rows(schema, events, rows, "$2", embedding, tenant_param)}
SELECT g.future, g.too_old, g.missed, g.horizon, r.*
FROM guard AS g LEFT JOIN ({_select(rebuilt, "$2")}
) AS r ON true"""


def in_scope(
    schema: str,
    tenant_param: str,
    scope_sql: str,
    row_scope_sql: str,
    t: str,
    *,
    key_param: str | None = None,
    after_param: str | None = None,
    limit_param: str | None = None,
) -> str:
    """A scope's memories at ``t`` (optionally under a key, after an id, a page), id order.

    ``scope_sql`` and ``row_scope_sql`` are the same
    :func:`memsvc.db.sql.scope_condition`, without alias and
    with alias ``m``: the present rows are read through the scope index, the
    rebuilt ones filtered once built (events carry no scope columns), so each
    memory is placed where it was at ``t``.
    """
    where = scope_sql
    if key_param is not None:
        where += f" AND key = {key_param}"
    if after_param is not None:
        where += f" AND id > {after_param}"
    limit = f"ORDER BY id LIMIT {limit_param}" if limit_param else "ORDER BY id"
    tenant = f"e.tenant_id = {tenant_param}"
    return f"""{_rows(schema, tenant, row_scope_sql, t, True, tenant_param)}
SELECT g.future, g.too_old, g.missed, g.horizon, r.*
FROM guard AS g LEFT JOIN ({_select(where, t)}
    {limit}
) AS r ON true
ORDER BY r.id"""


def count_in_scope(
    schema: str, tenant_param: str, scope_sql: str, row_scope_sql: str, t: str
) -> str:
    """How many memories a scope held at ``t`` (arguments as :func:`in_scope`)."""
    tenant = f"e.tenant_id = {tenant_param}"
    return f"""{_rows(schema, tenant, row_scope_sql, t, False, tenant_param)}
SELECT g.future, g.too_old, g.missed, g.horizon,
       (SELECT count(*) FROM ({_select(scope_sql, t)}) AS r) AS n
FROM guard AS g"""
