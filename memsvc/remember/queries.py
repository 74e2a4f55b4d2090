"""SQL of :mod:`memsvc.remember`: the ledger of remembered messages, and the candidates' locks."""

from __future__ import annotations

LEDGER_COLUMNS = (
    "tenant_id, project_id, agent_id, session_id, message_id, batch_id, extractor, model"
)


def remembered(schema: str, scope_sql: str, ids: str) -> str:
    """Which of the message ids ``ids`` (text[]) the exact scope ``scope_sql`` remembered."""
    return f"""
SELECT message_id FROM {schema}.remembered_messages
WHERE {scope_sql} AND message_id = ANY({ids}::text[])"""


def record(schema: str) -> str:
    """Record messages ``$5`` (text[]) of scope ``$1``-``$4`` as applied by batch ``$6``.

    Returns the ids recorded: one already there (a concurrent batch committed
    it first; the unique index made this insert wait for its commit) is not.
    """
    return f"""
INSERT INTO {schema}.remembered_messages ({LEDGER_COLUMNS})
SELECT $1, $2, $3, $4, message_id, $6, $7, $8 FROM unnest($5::text[]) AS message_id
ON CONFLICT DO NOTHING
RETURNING message_id"""


def lock_candidates(schema: str, scope_sql: str, ids: str) -> str:
    """Lock the memories ``ids`` (uuid[]) still in the exact scope and not expired.

    In id order, so batches locking overlapping candidates cannot deadlock.
    """
    return f"""
SELECT id, version FROM {schema}.memories
WHERE {scope_sql} AND id = ANY({ids}::uuid[])
  AND (expires_at IS NULL OR expires_at > now())
ORDER BY id
FOR UPDATE"""
