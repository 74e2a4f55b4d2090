"""SQL of valid time (:mod:`memsvc.memories.validity`): locking and closing validity."""

from __future__ import annotations

from memsvc.db.sql import INSERT_ARM_RETURNING, tenant_or_any
from memsvc.memories.queries import (
    EVENT_SCOPE,
    LIVE,
    MEMORY_COLUMNS,
    NEXT_CHANGE_KEY,
    PRIOR,
    qualified,
)


def lock_for_closing(schema: str, tenant_filter: bool) -> str:
    """Lock memories ``$1`` (optionally of tenant ``$2``) whose validity is about to close.

    In id order, as every writer of several memories locks. Returns what the
    checks need: scope, key, version, the effective ``valid_from``, whether
    validity is already closed (and by what), whether the row is live, and
    the transaction's ``now()`` (the default moment).
    """
    return f"""
SELECT tenant_id, project_id, agent_id, session_id, id, key, version,
       coalesce(valid_from, created_at) AS valid_from, valid_to, superseded_by,
       {LIVE} AS live, now() AS now
FROM {schema}.memories
WHERE id = ANY($1::uuid[]) AND {tenant_or_any("$2", tenant_filter)}
ORDER BY tenant_id, id
FOR UPDATE"""


def close_validity(schema: str, kind: str) -> str:
    """Close the validity of locked memories ``$2`` of tenant ``$1`` at ``$3``, with events.

    ``$4`` is the successor (NULL for an invalidation), recorded in the row
    and as the event's link. ``kind`` is ``superseded`` or ``invalidated``.
    """
    assert kind in ("superseded", "invalidated")
    return f"""
WITH old AS (
    SELECT {MEMORY_COLUMNS}, change_key FROM {schema}.memories
    WHERE tenant_id = $1 AND id = ANY($2::uuid[])
    FOR UPDATE
), upd AS (
    UPDATE {schema}.memories AS m
    SET valid_to = $3::timestamptz, superseded_by = $4::uuid, version = m.version + 1,
        updated_at = now(), change_key = {NEXT_CHANGE_KEY.format(row="m")}
    FROM old
    WHERE m.tenant_id = old.tenant_id AND m.id = old.id
    RETURNING {qualified(MEMORY_COLUMNS, "m")}
), ev AS (
    INSERT INTO {schema}.memory_events
        ({EVENT_SCOPE}, memory_id, kind, version, prior, change_key, links)
    SELECT {qualified(EVENT_SCOPE, "upd")}, upd.id, '{kind}', upd.version, {PRIOR},
           {NEXT_CHANGE_KEY.format(row="old")},
           CASE WHEN $4::uuid IS NULL THEN NULL ELSE ARRAY[$4::uuid] END
    FROM upd JOIN old ON old.tenant_id = upd.tenant_id AND old.id = upd.id
    {INSERT_ARM_RETURNING}
)
SELECT * FROM upd ORDER BY id"""
