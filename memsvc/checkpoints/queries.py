"""SQL of :class:`memsvc.checkpoints.repository.CheckpointRepository`.

Each function returns the text of one statement for a given schema name (a
validated identifier). Values are always ``$n`` parameters. Checkpoints are
ordered newest first by ``(created_at, id)``, which the session index
``(tenant_id, project_id, agent_id, session_id, created_at DESC, id DESC)``
serves for ``latest``, ``list`` and pruning.
"""

from __future__ import annotations

SUMMARY_COLUMNS = (
    "tenant_id, project_id, agent_id, session_id, id, description, size_bytes, created_at"
)
CHECKPOINT_COLUMNS = f"{SUMMARY_COLUMNS}, data"

NEWEST_FIRST = "ORDER BY created_at DESC, id DESC"


def _tenant(param: str | None) -> str:
    return f"AND tenant_id = {param}" if param else ""


def lock_session() -> str:
    """Serialize writers of one session's checkpoints until the transaction ends.

    The key is an injective text naming the session (see the repository); a
    hash collision between two sessions only makes them wait for each other.
    """
    return "SELECT pg_advisory_xact_lock(hashtextextended($1::text, 0))"


def insert_and_prune(schema: str, scope_sql: str, keep_param: str) -> str:
    """Insert a checkpoint and delete all but the newest ``keep - 1`` older ones.

    Runs under the session lock, after every earlier checkpoint of the session
    committed, so the new row (``created_at`` = ``clock_timestamp()``, taken
    after the lock was granted) is the newest: keeping it and the ``keep - 1``
    newest existing rows keeps exactly the newest ``keep``. The DELETE's
    snapshot does not include the new row, which is why the offset is
    ``keep - 1``; it is left out by id all the same, because Citus runs the
    two parts as statements of their own, and the second sees the new row.
    Parameters: $1-$4 scope, $5 id, $6 description, $7 data,
    $8 size.
    """
    return f"""
WITH ins AS (
    INSERT INTO {schema}.session_checkpoints
        (tenant_id, project_id, agent_id, session_id, id, description, data, size_bytes)
    VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8)
    RETURNING {SUMMARY_COLUMNS}
), pruned AS (
    DELETE FROM {schema}.session_checkpoints
    WHERE tenant_id = $1 AND id IN (
        SELECT id FROM {schema}.session_checkpoints
        WHERE {scope_sql} AND id <> $5
        {NEWEST_FIRST}
        OFFSET {keep_param} - 1
    )
)
SELECT * FROM ins"""


def prune(schema: str, scope_sql: str, keep_param: str) -> str:
    """Delete all but the newest ``keep`` checkpoints of a session; returns the count."""
    return f"""
WITH pruned AS (
    DELETE FROM {schema}.session_checkpoints
    WHERE tenant_id = $1 AND id IN (
        SELECT id FROM {schema}.session_checkpoints
        WHERE {scope_sql}
        {NEWEST_FIRST}
        OFFSET {keep_param}
    )
    RETURNING 1
)
SELECT count(*) FROM pruned"""


def select_by_id(schema: str, tenant_param: str | None) -> str:
    """One checkpoint with its data, by id (optionally within a tenant)."""
    return f"""
SELECT {CHECKPOINT_COLUMNS} FROM {schema}.session_checkpoints
WHERE id = $1 {_tenant(tenant_param)}"""


def latest(schema: str, scope_sql: str) -> str:
    """The newest checkpoint of a session, with its data."""
    return f"""
SELECT {CHECKPOINT_COLUMNS} FROM {schema}.session_checkpoints
WHERE {scope_sql}
{NEWEST_FIRST}
LIMIT 1"""


def list_page(
    schema: str,
    scope_sql: str,
    *,
    with_data: bool,
    after: tuple[str, str] | None,
    after_id: tuple[str, str] | None,
    limit_param: str,
) -> str:
    """One page of a session's checkpoints, newest first (keyset on (created_at, id)).

    ``after`` is the placeholders of the previous page's last (created_at, id);
    ``after_id`` instead names the placeholders of its tenant and id, and its
    position is looked up (a vanished cursor row gives an empty page).
    """
    columns = CHECKPOINT_COLUMNS if with_data else SUMMARY_COLUMNS
    if after is not None:
        cursor = f"AND (created_at, id) < ({after[0]}::timestamptz, {after[1]}::uuid)"
    elif after_id is not None:
        cursor = (
            f"AND (created_at, id) < (SELECT created_at, id FROM {schema}.session_checkpoints "
            f"WHERE tenant_id = {after_id[0]} AND id = {after_id[1]})"
        )
    else:
        cursor = ""
    return f"""
SELECT {columns} FROM {schema}.session_checkpoints
WHERE {scope_sql} {cursor}
{NEWEST_FIRST}
LIMIT {limit_param}"""


def delete(schema: str, tenant_param: str | None) -> str:
    """Delete a checkpoint by id; returns the tenants of the rows deleted."""
    return f"""
DELETE FROM {schema}.session_checkpoints WHERE id = $1 {_tenant(tenant_param)}
RETURNING tenant_id"""
