"""SQL of the erasing passes of :mod:`memsvc.erasure.eraser` (the checks are in
:mod:`memsvc.erasure.check_queries`).

Statement texts depend on the schema name (a validated identifier), on the
shape of the scope predicate and on the level the caller named; values are
always ``$n`` parameters.

Three rules run through every statement:

- **The cut is by commit.** A row qualifies when the transaction that
  created it (``created_xid``) is visible in the snapshot the erasure took
  when it began; ``created_at`` (which an import may supply) plays no part.
- **History belongs to a scope.** An event is the scope's when its own scope
  columns say so; a memory id used again in another scope after a delete
  does not make the other scope's history this one's.
- **Erasing statements say what they removed.** Each returns the keyed
  fingerprints of the texts it deleted (:mod:`memsvc.erasure.texts`),
  and plain texts within the budget the caller passes, for the check.
"""

from __future__ import annotations

from memsvc.db.sql import COLUMNS
from memsvc.erasure.texts import SUBSTRING_MIN_BYTES

# A snapshot of the transactions committed when the erasure began, and the
# clock (for the receipt only).
CUT = "SELECT clock_timestamp() AS started, pg_current_snapshot()::text AS snapshot"


def current_epoch(schema: str) -> str:
    """Start the transaction-id epoch first if the database moved to another cluster.

    ``created_xid`` holds transaction ids; after a restore into another
    cluster they would look uncommitted to every snapshot the cut takes, until
    the new epoch renumbers them (see migration 0023).
    """
    return f"SELECT {schema}.change_feed_epoch()"

# Texts shorter than this are not looked for.
MIN_TEXT_BYTES = 8

# What a pseudonym looks like: 'erased:' and 32 hex digits.
PSEUDONYM_PATTERN = "^erased:[0-9a-f]{32}$"


def committed_before(xid: str, snapshot: str) -> str:
    """Whether the transaction ``xid`` had committed when ``snapshot`` was taken."""
    return f"pg_visible_in_snapshot({xid}, {snapshot}::text::pg_snapshot)"


def same_scope(left: str, right: str) -> str:
    """Rows ``left`` and ``right`` are in the same exact scope (tenant compared by the caller)."""
    return " AND ".join(
        f"{left}.{column} IS NOT DISTINCT FROM {right}.{column}" for column in COLUMNS[1:]
    )


# A ``created`` event copied by an import before imports wrote the scope
# columns: content-free, it belongs to whichever memory holds its id.
LEGACY_CREATED = (
    "({e}.kind = 'created' AND {e}.project_id IS NULL AND {e}.agent_id IS NULL"
    " AND {e}.session_id IS NULL)"
)


# ------------------------------------------------------------------ pseudonyms


def pseudonymized(depth: int, key: str, prefix: str = "") -> list[str]:
    """Expressions for project, agent and session with every level below ``depth`` replaced.

    A level below the one the caller named becomes ``erased:`` and 32 hex
    digits of ``sha256(key || [project, ..., that level])``: one erasure
    maps one scope to one pseudonym (its tombstones still group), and with
    the key gone (it never leaves the erasing process) no one can tell which
    id it was. NULL stays NULL, a pseudonym stays as it is.
    """
    expressions = []
    for level in range(1, 4):
        column = f"{prefix}{COLUMNS[level]}"
        if level <= depth:
            expressions.append(column)
            continue
        path = ", ".join(f"{prefix}{c}" for c in COLUMNS[1 : level + 1])
        expressions.append(
            f"CASE WHEN {column} IS NULL OR {column} ~ '{PSEUDONYM_PATTERN}' THEN {column} "
            f"ELSE 'erased:' || left(encode(sha256({key}::bytea || "
            f"convert_to(jsonb_build_array({path})::text, 'UTF8')), 'hex'), 32) END"
        )
    return expressions


def names_below(depth: int, prefix: str = "") -> str:
    """Rows that still carry a real id below level ``depth`` (FALSE when there is none)."""
    conditions = [
        f"({prefix}{column} IS NOT NULL AND {prefix}{column} !~ '{PSEUDONYM_PATTERN}')"
        for column in COLUMNS[depth + 1 :]
    ]
    return "(" + " OR ".join(conditions) + ")" if conditions else "FALSE"


# ---------------------------------------------------------- texts removed


def json_strings(document: str) -> str:
    """Every string value inside a JSON document, at any depth (a set-returning call)."""
    return f"""jsonb_path_query({document}, 'strict $.** ? (@.type() == "string")')"""


def texts_removed(sources: list[str]) -> str:
    """The ``texts`` CTE: distinct texts of ``sources`` (each ``SELECT <text>``).

    Only texts of :data:`MIN_TEXT_BYTES` or more: shorter ones ("en",
    "done") are everywhere, and finding them proves nothing.
    """
    union = "\n        UNION ALL ".join(sources)
    return f"""texts AS (
    SELECT DISTINCT x.t FROM (
        {union}
    ) AS x(t)
    WHERE octet_length(x.t) >= {MIN_TEXT_BYTES}
), substring_candidates AS (
    SELECT t, row_number() OVER (ORDER BY octet_length(t)) AS n,
           sum(octet_length(t)) OVER (ORDER BY octet_length(t) ROWS UNBOUNDED PRECEDING)
               AS running
    FROM texts WHERE octet_length(t) >= {SUBSTRING_MIN_BYTES}
)"""


def memory_texts(alias: str) -> list[str]:
    """Text sources of the memories in CTE ``alias``: content, key, metadata strings."""
    metadata = json_strings(f"{alias}.metadata")
    return [
        f"SELECT {alias}.content FROM {alias}",
        f"SELECT {alias}.key FROM {alias}",
        f"SELECT v #>> '{{}}' FROM {alias}, {metadata} AS v",
    ]


def prior_texts(alias: str) -> list[str]:
    """Text sources of the prior values the events in CTE ``alias`` recorded."""
    metadata = json_strings(f"{alias}.prior -> 'metadata'")
    return [
        f"SELECT {alias}.prior ->> 'content' FROM {alias}",
        f"SELECT {alias}.prior ->> 'key' FROM {alias}",
        f"SELECT v #>> '{{}}' FROM {alias}, {metadata} AS v",
    ]


def removed_columns(key: str, texts_left: str, bytes_left: str) -> str:
    """Result columns: the texts' fingerprints, and plain texts within the budget.

    ``fingerprints``: length (4 bytes) || sha256(key || text), per distinct
    text. ``substring_texts``: texts long enough for the substring search,
    shortest first, at most ``texts_left`` of ``bytes_left`` bytes in all;
    ``more_texts``: some were left out.
    """
    return f"""(SELECT coalesce(array_agg(int4send(octet_length(t))
                                     || sha256({key}::bytea || convert_to(t, 'UTF8'))), '{{}}')
        FROM texts) AS fingerprints,
       (SELECT coalesce(array_agg(t ORDER BY n), '{{}}') FROM substring_candidates
        WHERE n <= {texts_left} AND running <= {bytes_left}) AS substring_texts,
       EXISTS (SELECT 1 FROM substring_candidates
               WHERE n > {texts_left} OR running > {bytes_left}) AS more_texts"""


# ------------------------------------------------------------------ assemblies


def lock_assemblies_batch(schema: str, scope_sql: str, snapshot: str, limit: str) -> str:
    """Lock the next batch of the scope's assemblies committed before the erasure began."""
    return f"""
SELECT tenant_id, id FROM {schema}.assemblies
WHERE {scope_sql} AND {committed_before("created_xid", snapshot)}
ORDER BY tenant_id, id
LIMIT {limit}
FOR UPDATE"""


def delete_assemblies(schema: str) -> str:
    """Delete locked assemblies (``$1``/``$2`` tenant/id arrays) and their memberships.

    ``$3`` the fingerprint key, ``$4``/``$5`` the plain-text budget.
    """
    sources = [
        "SELECT name FROM gone",
        "SELECT description FROM gone",
        f"SELECT v #>> '{{}}' FROM gone, {json_strings('gone.metadata')} AS v",
    ]
    return f"""
WITH doomed AS (
    SELECT * FROM unnest($1::text[], $2::uuid[]) AS d(tenant_id, id)
), members AS (
    DELETE FROM {schema}.assembly_members AS am USING doomed AS d
    WHERE am.tenant_id = d.tenant_id AND am.assembly_id = d.id
    RETURNING 1
), gone AS (
    DELETE FROM {schema}.assemblies AS a USING doomed AS d
    WHERE a.tenant_id = d.tenant_id AND a.id = d.id
    RETURNING a.name, a.description, a.metadata
), ledger AS (
    -- The feed's earlier events of these assemblies; the 'deleted' event the
    -- trigger writes for this statement comes after it and stays, content-free,
    -- like a memory's tombstone, so followers learn the assembly is gone.
    DELETE FROM {schema}.entity_events AS e USING doomed AS d
    WHERE e.tenant_id = d.tenant_id AND e.entity = 'assembly' AND e.entity_id = d.id
    RETURNING 1
), {texts_removed(sources)}
SELECT (SELECT count(*) FROM gone) AS assemblies, (SELECT count(*) FROM members) AS members,
       (SELECT count(*) FROM ledger) AS entity_events,
       {removed_columns("$3", "$4", "$5")}"""


# -------------------------------------------------------------------- memories


def lock_memories_batch(schema: str, scope_sql: str, snapshot: str, limit: str) -> str:
    """Lock the next batch of the scope's memories committed before the erasure began.

    Key order, so erasers never deadlock. Rows created by transactions that
    had not committed when the erasure began are not chased: the passes end
    even while writers keep writing, and those rows are kept whole.
    """
    return f"""
SELECT tenant_id, id FROM {schema}.memories
WHERE {scope_sql} AND {committed_before("created_xid", snapshot)}
ORDER BY tenant_id, id
LIMIT {limit}
FOR UPDATE"""


def erase_memories(schema: str, depth: int) -> str:
    """Delete locked memories with their scope's history; leave one ``erased`` event each.

    ``$1``/``$2`` tenant/id arrays, ``$3`` the fingerprint key, ``$4``/``$5``
    the plain-text budget, ``$6`` the pseudonym key. The history DELETE
    reads the statement's snapshot, so it never sees the tombstones this
    statement inserts. Only events of the memory's own scope go: an id the
    memory reused after another scope's memory was deleted leaves that
    scope's history alone. The tombstone carries the scope down to the
    level the caller named (``depth``); below it, pseudonyms.
    """
    project, agent, session = pseudonymized(depth, "$6")
    legacy = LEGACY_CREATED.format(e="e")
    return f"""
WITH doomed AS (
    SELECT * FROM unnest($1::text[], $2::uuid[]) AS d(tenant_id, id)
), gone AS (
    DELETE FROM {schema}.memories AS m USING doomed AS d
    WHERE m.tenant_id = d.tenant_id AND m.id = d.id
    RETURNING m.tenant_id, m.project_id, m.agent_id, m.session_id, m.id, m.version,
              m.change_key, m.content, m.key, m.metadata
), history AS (
    DELETE FROM {schema}.memory_events AS e USING gone AS g
    WHERE e.tenant_id = g.tenant_id AND e.memory_id = g.id
      AND ({same_scope("e", "g")} OR {legacy})
    RETURNING e.prior
), tombstones AS (
    -- The tombstone follows the memory's last write in the change feed (see
    -- memsvc.changes.queries).
    INSERT INTO {schema}.memory_events
        (tenant_id, project_id, agent_id, session_id, memory_id, kind, version, change_key)
    SELECT tenant_id, {project}, {agent}, {session}, id, 'erased', version,
           change_key  -- raised by assign_change_key
    FROM gone
    RETURNING 1
), {texts_removed(memory_texts("gone") + prior_texts("history"))}
SELECT (SELECT count(*) FROM gone) AS memories, (SELECT count(*) FROM history) AS events,
       (SELECT count(*) FROM tombstones) AS tombstones,
       {removed_columns("$3", "$4", "$5")}"""


# ------------------------------------------------------- deleted memories' history

# The scope of a deleted memory's history, as the batches carry it.
HISTORY_KEY = ("tenant_id", "memory_id", "project_id", "agent_id", "session_id")


def deleted_memories_batch(schema: str, scope_sql: str, after: str, limit: str) -> str:
    """Histories in the scope with no live memory of their id in their scope.

    One row per memory id and scope, in id order from ``after`` on (the
    walk over the tenant's events index resumes where the previous batch
    stopped; ``>=``, since one id may have histories in several scopes).
    """
    return f"""
SELECT DISTINCT e.tenant_id, e.memory_id, e.project_id, e.agent_id, e.session_id
FROM {schema}.memory_events AS e
WHERE {scope_sql} AND e.memory_id >= {after} AND e.kind <> 'erased'
  AND NOT EXISTS (
    SELECT 1 FROM {schema}.memories AS m
    WHERE m.tenant_id = e.tenant_id AND m.id = e.memory_id AND {same_scope("m", "e")}
  )
ORDER BY e.tenant_id, e.memory_id
LIMIT {limit}"""


# Serialises erasers of one deleted memory's history (there is no row to lock).
LOCK_HISTORIES = """
SELECT count(pg_advisory_xact_lock(hashtextextended(k.key, 0)))
FROM (SELECT DISTINCT key FROM unnest($1::text[]) AS u(key) ORDER BY key) AS k"""


def erase_histories(schema: str, depth: int) -> str:
    """Replace the histories of deleted memories by one tombstone each.

    ``$1``..``$5`` parallel arrays of :data:`HISTORY_KEY`, ``$6`` the
    fingerprint key, ``$7``/``$8`` the plain-text budget, ``$9`` the
    pseudonym key. A tombstone is written only for histories this statement
    removed, so a second eraser that waited for the first adds nothing.
    """
    project, agent, session = pseudonymized(depth, "$9")
    legacy = LEGACY_CREATED.format(e="e")
    # NOT IN over uncorrelated subqueries rather than correlated NOT EXISTS:
    # Citus plans no correlated subquery over a set-returning function or a
    # CTE. The compared values are never NULL (keys; the scope as an array,
    # whose equality treats NULL elements as equal), so NOT IN means NOT EXISTS.
    scope_d = "ARRAY[d.project_id, d.agent_id, d.session_id]"
    scope_m = "ARRAY[m.project_id, m.agent_id, m.session_id]"
    return f"""
WITH doomed AS (
    SELECT * FROM unnest($1::text[], $2::uuid[], $3::text[], $4::text[], $5::text[])
        AS d(tenant_id, id, project_id, agent_id, session_id)
    WHERE (d.tenant_id, d.id, {scope_d}) NOT IN (
        SELECT m.tenant_id, m.id, {scope_m} FROM {schema}.memories AS m
        WHERE m.tenant_id = ANY($1::text[]) AND m.id = ANY($2::uuid[])
    )
), history AS (
    DELETE FROM {schema}.memory_events AS e USING doomed AS d
    WHERE e.tenant_id = d.tenant_id AND e.memory_id = d.id AND e.kind <> 'erased'
      AND ({same_scope("e", "d")} OR ({legacy} AND (e.tenant_id, e.memory_id) NOT IN (
          SELECT m.tenant_id, m.id FROM {schema}.memories AS m
          WHERE m.tenant_id = ANY($1::text[]) AND m.id = ANY($2::uuid[])
      )))
    RETURNING e.tenant_id, e.memory_id, d.project_id, d.agent_id, d.session_id, e.version,
              e.change_key, e.prior
), last AS (
    SELECT tenant_id, memory_id, project_id, agent_id, session_id,
           max(version) AS version, max(change_key) AS change_key
    FROM history
    GROUP BY tenant_id, memory_id, project_id, agent_id, session_id
), tombstones AS (
    INSERT INTO {schema}.memory_events
        (tenant_id, project_id, agent_id, session_id, memory_id, kind, version, change_key)
    SELECT tenant_id, {project}, {agent}, {session}, memory_id, 'erased', version,
           change_key  -- raised by assign_change_key
    FROM last
    RETURNING 1
), {texts_removed(prior_texts("history"))}
SELECT (SELECT count(*) FROM history) AS events,
       (SELECT count(*) FROM tombstones) AS tombstones,
       {removed_columns("$6", "$7", "$8")}"""


# ------------------------------------------------------------------ checkpoints


def delete_checkpoints_batch(
    schema: str, scope_sql: str, snapshot: str, limit: str, key: str, texts_left: str,
    bytes_left: str,
) -> str:
    """Delete the next batch of the scope's session checkpoints and their earlier ledger events."""
    sources = [
        "SELECT description FROM gone",
        f"SELECT v #>> '{{}}' FROM gone, {json_strings('gone.data')} AS v",
    ]
    return f"""
WITH gone AS (
    DELETE FROM {schema}.session_checkpoints
    WHERE (tenant_id, id) IN (
        SELECT tenant_id, id FROM {schema}.session_checkpoints
        WHERE {scope_sql} AND {committed_before("created_xid", snapshot)}
        ORDER BY tenant_id, id
        LIMIT {limit}
        FOR UPDATE
    )
    RETURNING tenant_id, id, description, data
), ledger AS (
    -- As for assemblies: the trigger's 'deleted' event stays, the rest goes.
    DELETE FROM {schema}.entity_events AS e USING gone AS d
    WHERE e.tenant_id = d.tenant_id AND e.entity = 'checkpoint' AND e.entity_id = d.id
    RETURNING 1
), {texts_removed(sources)}
SELECT (SELECT count(*) FROM gone) AS checkpoints, (SELECT count(*) FROM ledger) AS entity_events,
       {removed_columns(key, texts_left, bytes_left)}"""


# ---------------------------------------------------------------------- ledger

def entity_gone(schema: str, alias: str) -> str:
    """An entity_events row (``alias``) whose assembly or checkpoint no longer exists."""
    return f"""NOT EXISTS (
        SELECT 1 FROM {schema}.assemblies AS a
        WHERE {alias}.entity = 'assembly' AND a.tenant_id = {alias}.tenant_id
          AND a.id = {alias}.entity_id)
    AND NOT EXISTS (
        SELECT 1 FROM {schema}.session_checkpoints AS c
        WHERE {alias}.entity = 'checkpoint' AND c.tenant_id = {alias}.tenant_id
          AND c.id = {alias}.entity_id)"""


def delete_gone_entity_events(schema: str, scope_sql: str, after: str, limit: str) -> str:
    """Delete the next batch of the scope's ledger events of assemblies and checkpoints gone
    before the erasure (deleted by ``delete``): all but their ``deleted`` event.

    In event order after ``after`` (keyset); returns the event ids deleted.
    """
    return f"""
WITH doomed AS (
    SELECT e.tenant_id, e.event_id FROM {schema}.entity_events AS e
    WHERE {scope_sql} AND e.event_id > {after} AND e.kind <> 'deleted'
      AND {entity_gone(schema, 'e')}
    ORDER BY e.tenant_id, e.event_id
    LIMIT {limit}
    FOR UPDATE
)
DELETE FROM {schema}.entity_events AS x USING doomed AS d
WHERE x.tenant_id = d.tenant_id AND x.event_id = d.event_id
RETURNING x.event_id"""


def pseudonymize_batch(schema: str, table: str, kind: str, scope_sql: str, depth: int,
                       key: str, after: str, limit: str) -> str:
    """Replace the ids below the named level in the next batch of the scope's ``kind`` events.

    For tombstones and ledger events written before (by ``delete``, by an
    older erasure, or by a run that crashed): they keep no id of the erased
    scope below the level the caller named. In event order after ``after``
    (keyset); returns the event ids changed.
    """
    # The pseudonyms are computed in the SELECT, not in SET: Citus allows no
    # function that is not IMMUTABLE (convert_to) inside a CASE of an UPDATE.
    project, agent, session = pseudonymized(depth, key, "e.")
    return f"""
WITH doomed AS (
    SELECT e.tenant_id, e.event_id, {project} AS project_id, {agent} AS agent_id,
           {session} AS session_id
    FROM {schema}.{table} AS e
    WHERE {scope_sql} AND e.event_id > {after} AND e.kind = '{kind}'
      AND {names_below(depth, "e.")}
    ORDER BY e.tenant_id, e.event_id
    LIMIT {limit}
    FOR UPDATE
)
UPDATE {schema}.{table} AS x
SET project_id = d.project_id, agent_id = d.agent_id, session_id = d.session_id
FROM doomed AS d
WHERE x.tenant_id = d.tenant_id AND x.event_id = d.event_id
RETURNING x.event_id"""


# ---------------------------------------------------------- remembered messages


def delete_remembered_batch(schema: str, scope_sql: str, snapshot: str, limit: str) -> str:
    """Delete the next batch of the scope's rows of the ``svc.remember`` ledger.

    Only rows committed before the erasure began, as for memories; the
    count comes back as ``rows``.
    """
    return f"""
WITH gone AS (
    DELETE FROM {schema}.remembered_messages
    WHERE (tenant_id, batch_id, message_id) IN (
        SELECT tenant_id, batch_id, message_id FROM {schema}.remembered_messages
        WHERE {scope_sql} AND {committed_before("created_xid", snapshot)}
        LIMIT {limit}
        FOR UPDATE SKIP LOCKED
    )
    RETURNING 1
)
SELECT count(*) AS rows FROM gone"""


def delete_policies(schema: str, scope_sql: str) -> str:
    """Delete the half-life policies of the erased scope (few rows: one statement)."""
    return f"""
WITH gone AS (
    DELETE FROM {schema}.memory_policies WHERE {scope_sql} RETURNING 1
)
SELECT count(*) FROM gone"""


# -------------------------------------------------------------------- LangGraph


def delete_store_items_batch(schema: str) -> str:
    """Delete the next ``$2`` LangGraph store items of tenant ``$1`` (vectors cascade)."""
    return f"""
WITH doomed AS (
    SELECT tenant_id, prefix, key FROM {schema}.langgraph_store_items
    WHERE tenant_id = $1
    LIMIT $2
    FOR UPDATE
), vectors AS (
    DELETE FROM {schema}.langgraph_store_vectors AS v USING doomed AS d
    WHERE v.tenant_id = d.tenant_id AND v.prefix = d.prefix AND v.key = d.key
    RETURNING 1
), gone AS (
    DELETE FROM {schema}.langgraph_store_items AS i USING doomed AS d
    WHERE i.tenant_id = d.tenant_id AND i.prefix = d.prefix AND i.key = d.key
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone) AS items, (SELECT count(*) FROM vectors) AS vectors"""


# ---------------------------------------------------------------------- vacuum

# Tables an erasure changes (LangGraph's only for a whole tenant).
ERASED_TABLES = (
    "assemblies", "assembly_members", "entity_events", "memories", "memory_events",
    "memory_policies", "remembered_messages", "session_checkpoints",
)
LANGGRAPH_TABLES = (
    "langgraph_checkpoints",
    "langgraph_checkpoint_blobs",
    "langgraph_checkpoint_writes",
    "langgraph_store_items",
    "langgraph_store_vectors",
    "langgraph_store_namespace_indexes",
)

# Which of the tables ``$2`` of schema ``$1`` this role may vacuum: their owner
# (or a member of the owning role), or a holder of MAINTAIN (PostgreSQL 17+).
VACUUMABLE = """
SELECT c.relname,
       pg_has_role(c.relowner, 'USAGE')
       OR CASE WHEN current_setting('server_version_num')::int >= 170000
               THEN has_table_privilege(c.oid, 'MAINTAIN') ELSE false END AS allowed
FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = ANY($2::text[])
ORDER BY c.relname"""


NO_STATEMENT_TIMEOUT = "SET statement_timeout = 0"
RESET_STATEMENT_TIMEOUT = "RESET statement_timeout"


def vacuum(schema: str, table: str, *, full: bool) -> str:
    """``VACUUM`` (or ``VACUUM FULL``) of one table: not inside a transaction block."""
    return f"VACUUM {'(FULL) ' if full else ''}{schema}.{table}"
