"""SQL of :class:`memsvc.memories.repository.MemoryRepository`.

Each function returns the text of one statement for a given schema name (a
validated identifier). Values are always ``$n`` parameters. Every write and its
history event happen in one statement (data-modifying CTEs), so a change and
its event commit together in one round trip.
"""

from __future__ import annotations

from memsvc.db.hnsw_walks import walk_target
from memsvc.db.sql import INSERT_ARM_RETURNING, tenant_or_any

# Every column of memories, in table order: SELECT lists, RETURNING, COPY.
MEMORY_COLUMN_NAMES = (
    "tenant_id",
    "project_id",
    "agent_id",
    "session_id",
    "id",
    "key",
    "content",
    "content_hash",
    "metadata",
    "embedding",
    "importance",
    "version",
    "created_at",
    "updated_at",
    "expires_at",
    "access_count",
    "last_accessed_at",
    "valid_from",
    "valid_to",
    "supersedes",
    "superseded_by",
    "pinned",
    "forgotten_at",
    "reinforced_count",
    "last_reinforced_at",
    "content_unique",
)
MEMORY_COLUMNS = ", ".join(MEMORY_COLUMN_NAMES)
# The same columns with the embedding left out (a NULL in its place): search
# hits carry their embedding only when the caller asks for it, since sending
# and decoding ten 384-float vectors costs more than the rest of the row.
MEMORY_COLUMNS_NO_EMBEDDING = MEMORY_COLUMNS.replace("embedding", "NULL AS embedding")

NOT_EXPIRED = "(expires_at IS NULL OR expires_at > now())"
# What search, list and count read: not expired, and not forgotten (a
# forgotten memory is still found by id until gc deletes it, see
# memsvc.ops.forget).
NOT_FORGOTTEN = "forgotten_at IS NULL"
LIVE = f"{NOT_EXPIRED} AND {NOT_FORGOTTEN}"

# Valid time (see memsvc.memories.validity): a NULL valid_from (rows from
# before valid time) means "since created_at", never later than now().
VALID_NOW = "(valid_from IS NULL OR valid_from <= now()) AND (valid_to IS NULL OR valid_to > now())"


def valid_at(t: str) -> str:
    """A condition true for the memories valid at ``t`` (a placeholder or expression)."""
    return f"coalesce(valid_from, created_at) <= {t} AND (valid_to IS NULL OR valid_to > {t})"


# Serialises writers of one scope (the key is an injective JSON text of the
# scope; two scopes whose 64-bit hashes collide merely wait for each other).
LOCK_SCOPE = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))"

# What a history event records of the row before a change (not the embedding,
# which is large and derived from the content).
PRIOR = (
    "jsonb_build_object('content', old.content, 'metadata', old.metadata, "
    "'importance', old.importance, 'key', old.key, 'expires_at', old.expires_at, "
    "'version', old.version, 'scope', jsonb_build_array(old.tenant_id, old.project_id, "
    "old.agent_id, old.session_id), 'valid_from', coalesce(old.valid_from, old.created_at), "
    "'valid_to', old.valid_to, 'supersedes', to_jsonb(old.supersedes), "
    "'superseded_by', old.superseded_by, 'pinned', old.pinned, "
    "'forgotten_at', old.forgotten_at)"
)

# The memory's scope, as memory_events records it.
EVENT_SCOPE = "tenant_id, project_id, agent_id, session_id"

# The change-feed key a write replacing (or deleting) ``row`` passes: the
# row's own key, which the trigger ``assign_change_key`` raises to this
# transaction's id on the node holding the row (migration 0031). The row is
# the latest committed version, locked by this writer, so a transaction that
# took its id early and then waited for the lock cannot put its event behind
# the earlier writer's in the feed.
NEXT_CHANGE_KEY = "{row}.change_key"


def qualified(columns: str, alias: str) -> str:
    """A column list (``"a, b"``) with each column prefixed by a table alias."""
    return ", ".join(f"{alias}.{column.strip()}" for column in columns.split(","))


DISTANCE_OPERATORS = {"cosine": "<=>", "l2": "<->", "ip": "<#>"}

# Similarity reported to users: higher is better, whatever the distance.
SIMILARITY = {
    "cosine": "1 - ({d})",
    "l2": "1 / (1 + ({d}))",
    "ip": "-({d})",
}


def insert_memory(schema: str) -> str:
    """Insert one memory (no-op on a duplicate id or content) and its 'created' event.

    ``$12`` is its valid_from (NULL: now), ``$13`` the memories it supersedes
    (NULL: none), also the event's links. Returns only what the server
    decides (version, timestamps): the caller has the rest, and sending the
    embedding back would double the traffic.
    """
    return f"""
WITH ins AS (
    INSERT INTO {schema}.memories
        (tenant_id, project_id, agent_id, session_id, id, key, content, content_hash,
         metadata, embedding, importance, expires_at, valid_from, supersedes, pinned,
         content_unique)
    VALUES ($1, $2, $3, $4, $5, NULL, $6, $7, $8::jsonb, $9, $10,
            now() + $11::float8 * interval '1 second', coalesce($12::timestamptz, now()),
            $13::uuid[], $14, $15)
    ON CONFLICT DO NOTHING
    RETURNING tenant_id, id, version, created_at, updated_at, expires_at, valid_from
), ev AS (
    INSERT INTO {schema}.memory_events
        (tenant_id, project_id, agent_id, session_id, memory_id, kind, version, links)
    SELECT tenant_id, $2, $3, $4, id, 'created', version, $13::uuid[] FROM ins
    {INSERT_ARM_RETURNING}
)
SELECT * FROM ins"""


def find_duplicate(schema: str, scope_sql: str) -> str:
    """The rows an insert collided with: same id, or same content in the same scope.

    ``live`` says whether each is still live (by this statement's ``now()``):
    an expired or forgotten one counts as gone (see :mod:`memsvc.memories.expired`).
    """
    return f"""
SELECT {MEMORY_COLUMNS}, {LIVE} AS live FROM {schema}.memories
WHERE tenant_id = $1 AND id = $2
UNION ALL
SELECT {MEMORY_COLUMNS}, {LIVE} AS live FROM {schema}.memories
WHERE {scope_sql} AND key IS NULL AND valid_to IS NULL AND content_unique AND content_hash = $3
  AND id <> $2"""


def insert_many(schema: str, vector_type: str) -> str:
    """Insert a batch from parallel arrays; duplicates are skipped, events written."""
    return f"""
WITH batch AS (
    SELECT * FROM unnest($5::uuid[], $6::text[], $7::text[], $8::jsonb[], $9::{vector_type}[],
                         $10::real[], $11::float8[], $12::timestamptz[], $13::bool[],
                         $14::bool[])
        AS b(id, content, content_hash, metadata, embedding, importance, ttl, valid_from,
             pinned, unique_)
), ins AS (
    INSERT INTO {schema}.memories
        (tenant_id, project_id, agent_id, session_id, id, key, content, content_hash,
         metadata, embedding, importance, expires_at, valid_from, pinned, content_unique)
    SELECT $1, $2, $3, $4, id, NULL, content, content_hash, metadata, embedding, importance,
           now() + ttl * interval '1 second', coalesce(valid_from, now()), pinned, unique_
    FROM batch
    ON CONFLICT DO NOTHING
    RETURNING {MEMORY_COLUMNS}
), ev AS (
    INSERT INTO {schema}.memory_events
        (tenant_id, project_id, agent_id, session_id, memory_id, kind, version)
    SELECT tenant_id, project_id, agent_id, session_id, id, 'created', version FROM ins
    {INSERT_ARM_RETURNING}
)
SELECT * FROM ins"""


def stored_embeddings(schema: str, scope_sql: str) -> str:
    """Embeddings already stored in a scope for content hashes ``$1``: no need to embed again."""
    return f"""
SELECT DISTINCT ON (content_hash) content_hash, embedding FROM {schema}.memories
WHERE {scope_sql} AND key IS NULL AND content_hash = ANY($1::text[]) AND embedding IS NOT NULL"""


def find_batch_duplicates(schema: str, scope_sql: str) -> str:
    """Rows a batch collided with, by id or by content hash in the scope (and ``live``)."""
    return f"""
SELECT {MEMORY_COLUMNS}, {LIVE} AS live FROM {schema}.memories
WHERE tenant_id = $1 AND id = ANY($2::uuid[])
UNION
SELECT {MEMORY_COLUMNS}, {LIVE} AS live FROM {schema}.memories
WHERE {scope_sql} AND key IS NULL AND valid_to IS NULL AND content_unique
  AND content_hash = ANY($3::text[])"""


def lock_expired(schema: str) -> str:
    """Lock the rows ``$2`` (uuid[]) of tenant ``$1`` that have expired or are forgotten.

    Re-checked under the lock: a row whose TTL was extended (or that was
    restored) meanwhile is not taken, one deleted meanwhile is skipped. Id
    order, as every deleter locks; one tenant per statement (see
    :func:`memsvc.db.sql.by_tenant`).
    """
    return f"""
SELECT tenant_id, id FROM {schema}.memories
WHERE tenant_id = $1 AND id = ANY($2::uuid[])
  AND (expires_at <= now() OR forgotten_at IS NOT NULL)
ORDER BY id
FOR UPDATE"""


def upsert_by_key(schema: str, scope_sql: str) -> str:
    """Insert or replace the memory with a key in a scope, with its event.

    ``$13``: when the value started to hold (NULL: the transaction's time).

    ``old`` locks the current row (if any) so the event records what it held;
    the unique index on the key makes racing writers update, never duplicate.
    """
    return f"""
WITH old AS (
    SELECT {MEMORY_COLUMNS} FROM {schema}.memories
    WHERE {scope_sql} AND key = $5
    FOR UPDATE
), up AS (
    INSERT INTO {schema}.memories AS m
        (tenant_id, project_id, agent_id, session_id, id, key, content, content_hash,
         metadata, embedding, importance, expires_at, valid_from)
    -- Reading "old" here makes it run (and lock) before the upsert; read
    -- only by the event insert, it would run after the row was changed by
    -- this very statement, and FOR UPDATE would skip it.
    SELECT $1, $2, $3, $4, $6, $5, $7, $8, $9::jsonb, $10, $11,
           now() + $12::float8 * interval '1 second', coalesce($13::timestamptz, now())
    WHERE (SELECT count(*) FROM old) >= 0
    ON CONFLICT (tenant_id, project_id, agent_id, session_id, key) WHERE key IS NOT NULL
    DO UPDATE SET content = EXCLUDED.content,
                  content_hash = EXCLUDED.content_hash,
                  metadata = EXCLUDED.metadata,
                  embedding = EXCLUDED.embedding,
                  importance = EXCLUDED.importance,
                  expires_at = EXCLUDED.expires_at,
                  -- the new value holds from now on (or from the moment given)
                  valid_from = EXCLUDED.valid_from,
                  valid_to = NULL,
                  version = m.version + 1,
                  -- The proposed row's default, not now(): Citus evaluates
                  -- no function that is not IMMUTABLE in DO UPDATE SET.
                  updated_at = EXCLUDED.updated_at,
                  change_key = {NEXT_CHANGE_KEY.format(row="m")}
    -- An update always raises the version past 1. (Not xmax = 0: a
    -- partitioned table cannot return system columns.)
    RETURNING {MEMORY_COLUMNS}, (m.version = 1) AS inserted, change_key
), ev AS (
    INSERT INTO {schema}.memory_events
        ({EVENT_SCOPE}, memory_id, kind, version, prior, change_key)
    SELECT {qualified(EVENT_SCOPE, "up")}, up.id,
           CASE WHEN up.inserted THEN 'created' ELSE 'updated' END,
           up.version, (SELECT {PRIOR} FROM old), up.change_key
    FROM up
    {INSERT_ARM_RETURNING}
)
-- Not correlated with "up" (Citus runs no correlated subquery over a CTE):
-- "up" holds exactly one row.
SELECT {qualified(MEMORY_COLUMNS, "up")}, up.inserted, EXISTS (
    SELECT 1 FROM {schema}.assembly_members am
    WHERE am.tenant_id = $1 AND am.memory_id = (SELECT up.id FROM up)
) AS in_assembly
FROM up"""


def select_by_key(schema: str, scope_sql: str) -> str:
    """The live memory stored under a key in a scope."""
    return f"""
SELECT {MEMORY_COLUMNS} FROM {schema}.memories
WHERE {scope_sql} AND key = $1 AND {NOT_EXPIRED}"""


def select_by_ids(schema: str, tenant_filter: bool) -> str:
    """Live memories by id (optionally within one tenant)."""
    tenant = "AND tenant_id = $2" if tenant_filter else ""
    return f"""
SELECT {MEMORY_COLUMNS} FROM {schema}.memories
WHERE id = ANY($1::uuid[]) {tenant} AND {NOT_EXPIRED}"""


def select_by_id(schema: str, tenant_filter: bool) -> str:
    """One live memory by id, ``$1`` a uuid (optionally within one tenant, ``$2``).

    What ``get`` runs: a plain equality on the id costs the server less to
    bind and run than ``= ANY`` of a one-element array.
    """
    tenant = "AND tenant_id = $2" if tenant_filter else ""
    return f"""
SELECT {MEMORY_COLUMNS} FROM {schema}.memories
WHERE id = $1 {tenant} AND {NOT_EXPIRED}"""


def _touch(schema: str, match: str) -> str:
    """Count an access of the live memories ``match`` selects; read the others unchanged.

    The others: forgotten ones, and one a concurrent pass forgot while this
    statement waited for its row lock (read as the statement's snapshot saw
    it). Two arms rather than a CASE around ``now()``: Citus refuses a
    non-immutable function inside CASE in a distributed UPDATE.
    """
    return f"""
WITH touched AS (
    UPDATE {schema}.memories
    SET access_count = access_count + 1, last_accessed_at = now()
    WHERE {match} AND {NOT_EXPIRED} AND {NOT_FORGOTTEN}
    RETURNING {MEMORY_COLUMNS}
)
SELECT * FROM touched
UNION ALL
SELECT {MEMORY_COLUMNS} FROM {schema}.memories
WHERE {match} AND {NOT_EXPIRED} AND id NOT IN (SELECT id FROM touched)"""


def touch_by_id(schema: str, tenant_filter: bool) -> str:
    """Like :func:`select_by_id`, and count the access (see :func:`touch_by_ids`)."""
    return _touch(schema, "id = $1" + (" AND tenant_id = $2" if tenant_filter else ""))


def touch_by_ids(schema: str, tenant_filter: bool) -> str:
    """Like :func:`select_by_ids`, and count the access.

    A forgotten memory is returned but its access not counted: reading it
    does not bring it back (``restore`` or pinning does), so gc's deletion
    after the grace period never removes a memory renewed meanwhile.
    """
    return _touch(
        schema, "id = ANY($1::uuid[])" + (" AND tenant_id = $2" if tenant_filter else "")
    )


def update_memory(schema: str, tenant_filter: bool) -> str:
    """Change the given fields under a row lock, checking the expected version.

    Parameters: $1 id, $2 tenant (NULL without ``tenant_filter``), $3 expected
    version or NULL, then
    one flag and one value per field ($4/$5 content+hash as $5/$6, ...). The
    statement returns the prior version so the caller can tell a stale version
    (row found, not updated) from a missing row (nothing found).
    """
    return f"""
WITH old AS (
    SELECT {MEMORY_COLUMNS}, change_key FROM {schema}.memories
    WHERE id = $1 AND {tenant_or_any("$2", tenant_filter)} AND {NOT_EXPIRED}
    FOR UPDATE
), upd AS (
    UPDATE {schema}.memories AS m
    SET content = CASE WHEN $4::bool THEN $5 ELSE m.content END,
        content_hash = CASE WHEN $4::bool THEN $6 ELSE m.content_hash END,
        metadata = CASE WHEN $7::bool THEN $8::jsonb ELSE m.metadata END,
        importance = CASE WHEN $9::bool THEN $10::real ELSE m.importance END,
        embedding = CASE WHEN $11::bool THEN $12 ELSE m.embedding END,
        pinned = CASE WHEN $13::bool THEN $14::bool ELSE m.pinned END,
        -- Pinning a forgotten memory restores it: a pinned memory is never forgotten.
        forgotten_at = CASE WHEN $13::bool AND $14::bool THEN NULL ELSE m.forgotten_at END,
        version = m.version + 1,
        updated_at = now(),
        change_key = {NEXT_CHANGE_KEY.format(row="m")}
    FROM old
    WHERE m.tenant_id = old.tenant_id AND m.id = old.id
      AND ($3::int IS NULL OR old.version = $3::int)
    RETURNING {qualified(MEMORY_COLUMNS, "m")}
), ev AS (
    INSERT INTO {schema}.memory_events
        ({EVENT_SCOPE}, memory_id, kind, version, prior, change_key)
    SELECT {qualified(EVENT_SCOPE, "upd")}, upd.id, 'updated', upd.version, {PRIOR},
           {NEXT_CHANGE_KEY.format(row="old")}
    FROM upd JOIN old ON old.tenant_id = upd.tenant_id AND old.id = upd.id
    {INSERT_ARM_RETURNING}
)
SELECT upd.*, (SELECT version FROM old) AS prior_version,
       (SELECT count(*) FROM old) AS found
FROM (SELECT 1) one LEFT JOIN upd ON true"""


def patch_metadata(schema: str, tenant_filter: bool) -> str:
    """Merge a JSON object into metadata in place (``||``), bounded in size.

    Parameters: $1 id, $2 patch, $3 tenant (NULL without ``tenant_filter``), $4
    the size limit.
    """
    return f"""
WITH old AS (
    SELECT {MEMORY_COLUMNS}, change_key FROM {schema}.memories
    WHERE id = $1 AND {tenant_or_any("$3", tenant_filter)} AND {NOT_EXPIRED}
    FOR UPDATE
), upd AS (
    UPDATE {schema}.memories AS m
    SET metadata = m.metadata || $2::jsonb, version = m.version + 1, updated_at = now(),
        change_key = {NEXT_CHANGE_KEY.format(row="m")}
    FROM old
    WHERE m.tenant_id = old.tenant_id AND m.id = old.id
      AND octet_length((m.metadata || $2::jsonb)::text) <= $4
    RETURNING {qualified(MEMORY_COLUMNS, "m")}
), ev AS (
    INSERT INTO {schema}.memory_events
        ({EVENT_SCOPE}, memory_id, kind, version, prior, change_key)
    SELECT {qualified(EVENT_SCOPE, "upd")}, upd.id, 'updated', upd.version, {PRIOR},
           {NEXT_CHANGE_KEY.format(row="old")}
    FROM upd JOIN old ON old.tenant_id = upd.tenant_id AND old.id = upd.id
    {INSERT_ARM_RETURNING}
)
SELECT upd.*, (SELECT count(*) FROM old) AS found
FROM (SELECT 1) one LEFT JOIN upd ON true"""


def lock_for_delete(schema: str, tenant_filter: bool) -> str:
    """Lock memories about to be deleted (in id order, so deleters never deadlock)."""
    tenant = "AND tenant_id = $2" if tenant_filter else ""
    return f"""
SELECT tenant_id, id FROM {schema}.memories
WHERE id = ANY($1::uuid[]) {tenant}
ORDER BY tenant_id, id
FOR UPDATE"""


def lock_scope_batch(schema: str, scope_sql: str, limit_param: str) -> str:
    """Lock the next batch of a scope's memories for deletion."""
    return f"""
SELECT tenant_id, id FROM {schema}.memories
WHERE {scope_sql}
ORDER BY tenant_id, id
LIMIT {limit_param}
FOR UPDATE"""


# What a delete's history event needs of the row: not the embedding nor the
# text-search vector, which would only be copied into the statement's work
# table and dropped.
DELETED_COLUMNS = (
    f"{EVENT_SCOPE}, id, content, metadata, importance, key, expires_at, version, change_key, "
    "created_at, valid_from, valid_to, supersedes, superseded_by, pinned, forgotten_at"
)


# ``committed_at`` of a ``deleted`` event, written with it: the deletion of a
# memory already expired at this transaction's start (gc's expired batches;
# the row is locked, so its expiry is the one recorded in ``prior``) is
# placed at that start instead of at the commit a few ms later, and no as-of
# read can tell: for t before the start both place the deletion after t; for
# t from the start on, the memory was expired at t, hidden whether the
# deletion counts as after t (its prior, expired) or not (no row). gc then
# has no commit time to copy for these events, an update of each about as
# costly as the delete itself. Every other deletion is placed at its commit
# (NULL until gc copies it).
DELETED_COMMITTED_AT = "CASE WHEN old.expires_at <= now() THEN now() END"


def delete_locked(schema: str) -> str:
    """Delete locked memories (given as tenant/id arrays) and record their events.

    ``id = ANY($2)`` repeats part of the join condition on purpose: it gives
    the planner an index path with a correct row estimate. Without it the
    join with ``unnest`` was planned as a hash join over a sequential scan of
    the whole table (every batch reading every row) on stores of up to
    about 100,000 rows.
    """
    return f"""
WITH gone AS (
    DELETE FROM {schema}.memories AS old
    USING unnest($1::text[], $2::uuid[]) AS d(tenant_id, id)
    WHERE old.id = ANY($2::uuid[]) AND old.tenant_id = d.tenant_id AND old.id = d.id
    RETURNING {qualified(DELETED_COLUMNS, "old")}
), ev AS (
    INSERT INTO {schema}.memory_events
        ({EVENT_SCOPE}, memory_id, kind, version, prior, change_key, committed_at)
    SELECT {qualified(EVENT_SCOPE, "old")}, old.id, 'deleted', old.version, {PRIOR},
           {NEXT_CHANGE_KEY.format(row="old")}, {DELETED_COMMITTED_AT}
    FROM gone AS old
    {INSERT_ARM_RETURNING}
)
SELECT count(*) FROM gone"""


def list_page(
    schema: str,
    scope_sql: str,
    after_param: str | None,
    limit_param: str,
    validity_sql: str = "TRUE",
) -> str:
    """One page of a scope's live memories in id (creation) order."""
    after = f"AND id > {after_param}" if after_param else ""
    return f"""
SELECT {MEMORY_COLUMNS} FROM {schema}.memories
WHERE {scope_sql} {after} AND {LIVE} AND {validity_sql}
ORDER BY id
LIMIT {limit_param}"""


def count(schema: str, scope_sql: str, validity_sql: str = "TRUE") -> str:
    """Number of live memories in a scope (``validity_sql``: of those valid as asked)."""
    return (
        f"SELECT count(*) FROM {schema}.memories "
        f"WHERE {scope_sql} AND {LIVE} AND {validity_sql}"
    )


def history(schema: str, tenant_param: str | None) -> str:
    """A memory's events, oldest first."""
    tenant = f"AND tenant_id = {tenant_param}" if tenant_param else ""
    return f"""
SELECT event_id, memory_id, kind, version, prior, at, links FROM {schema}.memory_events
WHERE memory_id = $1 {tenant}
ORDER BY event_id"""


# Reciprocal rank fusion: a hit's fused score is the sum over the arms that
# found it of 1 / (RRF_K + its rank in that arm). 60 is the constant of the
# original RRF paper; it keeps one arm's top rank from drowning the other arm.
RRF_K = 60
# Added to the fused score of a text-arm match when the query is a question
# holding identifier tokens (ENG-4312, retry_backoff_ms: see text_terms), all
# of which every such match holds. It exceeds any fused score without it (at
# most 2 / (RRF_K + 1), first in both arms), so those matches rank above every
# memory the vector arm found alone: by plain RRF the exact match of an
# identifier an embedding cannot see only ties with the vector arm's first
# hit, and can lose the tie.
IDENTIFIER_BONUS = 2.0 / (RRF_K + 1)


def text_query(config: str, text_param: str) -> str:
    """The tsquery of a user's text (``websearch_to_tsquery``: quotes, ``or``, ``-word``)."""
    return f"websearch_to_tsquery('{config}'::regconfig, {text_param})"


def query_terms(config: str) -> str:
    """The number of nodes of a text query's tsquery (0: no searchable words).

    And which of the words ``$2`` parse to lexemes on their own (see
    :mod:`memsvc.memories.searchable_words`).
    """
    return f"""
SELECT numnode({text_query(config, "$1")}) AS terms,
       ARRAY(SELECT w FROM unnest($2::text[]) AS w
             WHERE numnode({text_query(config, "w")}) > 0) AS searchable"""


def search(
    schema: str,
    *,
    mode: str,
    distance: str,
    scope_sql: str,
    filter_sql: str,
    query_param: str | None,
    text_param: str | None,
    config: str,
    k_param: str,
    candidates_param: str | None,
    exact: bool,
    with_embeddings: bool = True,
    required_param: str | None = None,
    ranked_param: str | None = None,
    identifier_boost: bool = False,
    walk_ef: int | None = None,
    vector_type: str = "vector",
) -> str:
    """The search statement of a mode (``vector``, ``text`` or ``hybrid``), in one statement.

    ``vector``: nearest neighbours. The plain form lets PostgreSQL choose: for
    a small scope it reads the scope's rows through the btree scope index and
    sorts them (exact); for a large one it walks the HNSW index with
    iterative scans, filtering as it goes. The ``exact`` form adds ``+ 0`` to
    the ordering, which hides it from the planner, so the (approximate) HNSW
    index can never serve it.

    ``text``: rows whose ``content_tsv`` matches the query, by ``ts_rank_cd``
    (no rows at all: see :func:`query_terms`).

    ``hybrid``: both arms, each limited to ``candidates_param`` rows under the
    same scope and filters, fused with reciprocal rank fusion. Its text arm
    matches ``required_param`` and ranks by ``ranked_param`` (both
    ``websearch_to_tsquery`` texts, see :mod:`memsvc.memories.text_terms`;
    default: ``text_param`` for both). With ``identifier_boost`` (a question
    holding identifier tokens, all required) its matches get
    ``IDENTIFIER_BONUS``. Hybrid statements return at least one row:
    ``query_terms`` (0 when the text parses to nothing) with NULL memory
    columns when nothing matched.

    ``walk_ef``: the HNSW walk keeps that many candidates instead of the
    connection's ``hnsw.ef_search`` (see :func:`memsvc.db.hnsw_walks.walk_target`).
    """
    walk = None
    if mode != "text" and walk_ef is not None and not exact:
        assert query_param is not None
        walk = walk_target(query_param, walk_ef, vector_type)
    if mode == "vector":
        assert query_param is not None
        return _vector_search(
            schema, distance, scope_sql, filter_sql, query_param, k_param, exact, with_embeddings,
            walk,
        )
    assert text_param is not None
    where = f"{scope_sql} AND {filter_sql} AND {LIVE}"
    if mode == "text":
        return _text_search(schema, config, where, text_param, k_param, with_embeddings)
    assert query_param is not None and candidates_param is not None
    return _hybrid_search(
        schema,
        distance,
        config,
        where,
        query_param,
        text_param,
        required_param or text_param,
        ranked_param or text_param,
        k_param,
        candidates_param,
        exact=exact,
        with_embeddings=with_embeddings,
        identifier_boost=identifier_boost,
        walk=walk,
    )


def _text_search(
    schema: str, config: str, where: str, text_param: str, k_param: str, with_embeddings: bool
) -> str:
    # The statement a hand-written query would be: the tsquery computed
    # once, in FROM (in the select list and WHERE a generic plan would
    # parse the parameter again for every row), no wrapper. An empty
    # result is told apart from a query with no searchable words by
    # query_terms, run only then.
    columns = MEMORY_COLUMNS if with_embeddings else MEMORY_COLUMNS_NO_EMBEDDING
    return f"""
SELECT {columns}, ts_rank_cd(content_tsv, q) AS text_score
FROM {schema}.memories, {text_query(config, text_param)} AS q
WHERE {where} AND content_tsv @@ q
ORDER BY text_score DESC, id
LIMIT {k_param}"""


def _hybrid_search(
    schema: str,
    distance: str,
    config: str,
    where: str,
    query_param: str,
    text_param: str,
    required_param: str,
    ranked_param: str,
    k_param: str,
    candidates_param: str,
    *,
    exact: bool,
    with_embeddings: bool,
    identifier_boost: bool,
    walk: str | None = None,
) -> str:
    tsquery = text_query(config, text_param)
    required = text_query(config, required_param)
    ranked = text_query(config, ranked_param)
    text_arm = f"""
    SELECT tenant_id, id, ts_rank_cd(content_tsv, rq) AS text_score
    FROM {schema}.memories, {required} AS mq, {ranked} AS rq
    WHERE {where} AND content_tsv @@ mq
    ORDER BY text_score DESC, id"""
    op = DISTANCE_OPERATORS[distance]
    target = walk or query_param
    order = f"(embedding {op} {query_param}) + 0" if exact else f"embedding {op} {target}"
    similarity = SIMILARITY[distance].format(d=f"m.embedding {op} {query_param}")
    hit_columns = qualified(MEMORY_COLUMNS, "m")
    bonus = (
        f"\n             + CASE WHEN t.id IS NULL THEN 0 ELSE {IDENTIFIER_BONUS!r}::float8 END"
        if identifier_boost
        else ""
    )
    if not with_embeddings:
        hit_columns = hit_columns.replace("m.embedding", "NULL AS embedding")
    return f"""
WITH vector_arm AS (
    SELECT tenant_id, id, row_number() OVER (ORDER BY distance) AS vector_rank FROM (
        SELECT tenant_id, id, {order} AS distance
        FROM {schema}.memories
        WHERE {where} AND embedding IS NOT NULL
        ORDER BY {order}
        LIMIT {candidates_param}
    ) AS nearest
), text_arm AS (
    SELECT tenant_id, id, text_score,
           row_number() OVER (ORDER BY text_score DESC, id) AS text_rank
    FROM ({text_arm}
        LIMIT {candidates_param}
    ) AS matching
), fused AS (
    SELECT coalesce(v.tenant_id, t.tenant_id) AS tenant_id, coalesce(v.id, t.id) AS id,
           v.vector_rank, t.text_rank, t.text_score,
           coalesce(1.0::float8 / ({RRF_K} + v.vector_rank), 0)
             + coalesce(1.0::float8 / ({RRF_K} + t.text_rank), 0){bonus} AS fused_score
    FROM vector_arm AS v FULL JOIN text_arm AS t ON t.tenant_id = v.tenant_id AND t.id = v.id
    -- Cut to the page on ids alone; only its rows are read back in full.
    ORDER BY fused_score DESC, v.vector_rank NULLS LAST, t.text_rank NULLS LAST
    LIMIT {k_param}
), hits AS (
    SELECT {hit_columns}, f.vector_rank, f.text_rank, f.text_score,
           f.fused_score, {similarity} AS similarity
    FROM fused AS f JOIN {schema}.memories AS m ON m.tenant_id = f.tenant_id AND m.id = f.id
)
SELECT numnode({tsquery}) AS query_terms, (SELECT count(*) FROM vector_arm) AS vector_found,
       {"true" if exact else "false"} AS via_exact, hits.*
FROM (SELECT 1) AS one LEFT JOIN hits ON true
ORDER BY hits.fused_score DESC, hits.vector_rank NULLS LAST, hits.text_rank NULLS LAST"""


def _vector_search(
    schema: str,
    distance: str,
    scope_sql: str,
    filter_sql: str,
    query_param: str,
    k_param: str,
    exact: bool,
    with_embeddings: bool = True,
    walk: str | None = None,
) -> str:
    op = DISTANCE_OPERATORS[distance]
    target = walk or query_param
    order = f"(embedding {op} {query_param}) + 0" if exact else f"embedding {op} {target}"
    similarity = SIMILARITY[distance].format(d="distance")
    columns = MEMORY_COLUMNS if with_embeddings else MEMORY_COLUMNS_NO_EMBEDDING
    # Iterative index scans return rows in relaxed order: sort the k found.
    return f"""
SELECT *, {similarity} AS similarity, {"true" if exact else "false"} AS via_exact FROM (
    SELECT {columns}, {order} AS distance
    FROM {schema}.memories
    WHERE {scope_sql} AND {filter_sql} AND embedding IS NOT NULL AND {LIVE}
    ORDER BY {order}
    LIMIT {k_param}
) AS hits
ORDER BY distance"""
