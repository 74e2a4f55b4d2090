"""SQL of restoring a forgotten memory (``svc.memories.restore``).

The forget pass itself, which sets ``forgotten_at``, is maintenance: see
:mod:`memsvc.ops.forget_queries`.
"""

from __future__ import annotations

from memsvc.db.sql import INSERT_ARM_RETURNING, tenant_or_any
from memsvc.memories.queries import (
    EVENT_SCOPE,
    MEMORY_COLUMNS,
    NEXT_CHANGE_KEY,
    NOT_EXPIRED,
    PRIOR,
    qualified,
)

# A forget or restore event's prior: the usual values and whether (since
# when) the memory was forgotten.
FORGETTING_PRIOR = f"{PRIOR} || jsonb_build_object('forgotten_at', old.forgotten_at)"


def restore(schema: str, tenant_filter: bool) -> str:
    """Bring back the forgotten memory ``$1`` (tenant ``$2``) within its grace period.

    ``$3``: the grace period in seconds. Restoring counts as an access (it
    renews the memory's age, so the next pass does not forget it again at
    once). Returns ``found`` (rows with the id), ``restored`` (1 or 0),
    ``was_forgotten_at`` and the memory's columns (restored, or as it is).
    """
    return f"""
WITH old AS (
    SELECT {MEMORY_COLUMNS}, change_key FROM {schema}.memories
    WHERE id = $1 AND {tenant_or_any("$2", tenant_filter)} AND {NOT_EXPIRED}
    FOR UPDATE
), upd AS (
    UPDATE {schema}.memories AS m
    SET forgotten_at = NULL, last_accessed_at = now(), access_count = m.access_count + 1,
        version = m.version + 1, updated_at = now(),
        change_key = {NEXT_CHANGE_KEY.format(row="m")}
    FROM old
    WHERE m.tenant_id = old.tenant_id AND m.id = old.id
      AND old.forgotten_at IS NOT NULL
      AND old.forgotten_at > now() - $3::float8 * interval '1 second'
    RETURNING {qualified(MEMORY_COLUMNS, "m")}
), ev AS (
    INSERT INTO {schema}.memory_events
        ({EVENT_SCOPE}, memory_id, kind, version, prior, change_key)
    SELECT {qualified(EVENT_SCOPE, "upd")}, upd.id, 'updated', upd.version, {FORGETTING_PRIOR},
           {NEXT_CHANGE_KEY.format(row="old")}
    FROM upd JOIN old ON old.tenant_id = upd.tenant_id AND old.id = upd.id
    {INSERT_ARM_RETURNING}
)
SELECT r.*, (SELECT count(*) FROM old) AS found, (SELECT count(*) FROM upd) AS restored,
       (SELECT forgotten_at FROM old LIMIT 1) AS was_forgotten_at
FROM (SELECT 1) one LEFT JOIN (
    SELECT * FROM upd
    UNION ALL
    SELECT {MEMORY_COLUMNS} FROM old WHERE NOT EXISTS (SELECT 1 FROM upd)
) AS r ON true"""
