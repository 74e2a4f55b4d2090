"""SQL of semantic deduplication: the nearest live memories of a scope, and merging into one."""

from __future__ import annotations

from memsvc.db.sql import INSERT_ARM_RETURNING
from memsvc.memories.dedupe_rule import REINFORCE_WEIGHT
from memsvc.memories.queries import (
    DISTANCE_OPERATORS,
    EVENT_SCOPE,
    LIVE,
    MEMORY_COLUMNS,
    NEXT_CHANGE_KEY,
    PRIOR,
    VALID_NOW,
    qualified,
)

# Valid now, by the statement's clock: it reads after the scope's lock is
# granted, and a memory the writer before it stored is valid from that
# writer's transaction time, which may be later than this transaction's now().
VALID_AT_STATEMENT = VALID_NOW.replace("now()", "statement_timestamp()")

# Candidates compared per write: the nearest few, of which the first that
# passes the identifier rule (see memsvc.memories.dedupe_rule) is taken.
CANDIDATES = 5
# hnsw.ef_search of that read (at most Settings.hnsw_ef_search).
EF_SEARCH = 40


def nearest(schema: str, distance: str, scope_sql: str, query: str, limit: str) -> str:
    """The live unkeyed memories of an exact scope valid now nearest ``query``, with
    their cosine similarity, most similar first.

    The inner read is ordered by the configured distance (its HNSW index
    serves it); an iterative scan in relaxed order may return it slightly
    out of order, and with ``l2`` or ``ip`` that order is not the cosine's,
    so the candidates are sorted again by cosine: callers compare every one
    with the threshold.
    """
    op = DISTANCE_OPERATORS[distance]
    return f"""
SELECT * FROM (
    SELECT {MEMORY_COLUMNS}, 1 - (embedding <=> {query}) AS cosine FROM {schema}.memories
    WHERE {scope_sql} AND key IS NULL AND {LIVE} AND {VALID_AT_STATEMENT}
      AND embedding IS NOT NULL
    ORDER BY embedding {op} {query}
    LIMIT {limit}
) AS near
ORDER BY cosine DESC, id"""


def reinforce(schema: str) -> str:
    """Merge a write into the memory (``$1`` tenant, ``$2`` id) if it is still live
    and its validity still open (not superseded or invalidated meanwhile).

    Its importance rises by the documented rule (``$3`` the write's), its
    reinforcement count and time are set, a pinned write (``$6``) pins it,
    and a write valid from earlier (``$7``, NULL: now) moves its
    ``valid_from`` back to that moment: the fact held since then. The
    history event keeps the write's wording (``$4`` content, ``$5``
    metadata) under ``merged``. Returns the memory after the merge, or no
    row if it is gone or closed (the caller then stores the write).
    """
    raised = f"least(1, greatest(m.importance + (1 - m.importance) * {REINFORCE_WEIGHT} * $3, $3))"
    return f"""
WITH old AS (
    SELECT {MEMORY_COLUMNS}, change_key FROM {schema}.memories
    WHERE tenant_id = $1 AND id = $2 AND {LIVE} AND valid_to IS NULL
    FOR UPDATE
), upd AS (
    UPDATE {schema}.memories AS m
    SET reinforced_count = m.reinforced_count + 1, last_reinforced_at = now(),
        importance = {raised}, pinned = m.pinned OR $6::bool,
        valid_from = least(m.valid_from, $7::timestamptz),
        version = m.version + 1, updated_at = now(),
        change_key = {NEXT_CHANGE_KEY.format(row="m")}
    FROM old
    WHERE m.tenant_id = old.tenant_id AND m.id = old.id
    RETURNING {qualified(MEMORY_COLUMNS, "m")}
), ev AS (
    INSERT INTO {schema}.memory_events
        ({EVENT_SCOPE}, memory_id, kind, version, prior, change_key)
    SELECT {qualified(EVENT_SCOPE, "upd")}, upd.id, 'updated', upd.version,
           {PRIOR} || jsonb_build_object('merged', jsonb_build_object(
               'content', $4::text, 'metadata', $5::jsonb, 'importance', $3::real,
               'pinned', $6::bool, 'valid_from', $7::timestamptz)),
           {NEXT_CHANGE_KEY.format(row="old")}
    FROM upd JOIN old ON old.tenant_id = upd.tenant_id AND old.id = upd.id
    {INSERT_ARM_RETURNING}
)
SELECT * FROM upd"""


def older_nearest(schema: str, distance: str, scope_sql: str) -> str:
    """Like :func:`nearest`, among the memories older than ``$2`` (an id) only.

    ``$1`` the query vector, ``$3`` the number of candidates.
    """
    return nearest(schema, distance, f"{scope_sql} AND id < $2", "$1", "$3")


def scopes_under(schema: str, scope_sql: str) -> str:
    """The exact scopes holding unkeyed memories under a scope."""
    return f"""
SELECT DISTINCT tenant_id, project_id, agent_id, session_id FROM {schema}.memories
WHERE {scope_sql} AND key IS NULL"""


def page(schema: str, scope_sql: str, after: str, limit: str) -> str:
    """The next memories of an exact scope a dedupe pass looks at, in id (age) order.

    Only memories a pass may delete once merged: never one stored with
    ``dedupe="off"`` (``content_unique`` false: the caller asked to keep it
    apart), nor one that supersedes others (their ``superseded_by`` names it).
    A pinned one merges and carries its pin to the memory kept.
    """
    return f"""
SELECT tenant_id, id, content, metadata, importance, embedding, pinned, valid_from
FROM {schema}.memories
WHERE {scope_sql} AND key IS NULL AND {LIVE} AND {VALID_AT_STATEMENT}
  AND content_unique AND supersedes IS NULL
  AND embedding IS NOT NULL AND id > {after}
ORDER BY id
LIMIT {limit}"""
