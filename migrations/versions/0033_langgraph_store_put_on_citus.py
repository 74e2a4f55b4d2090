"""LangGraph store: ``langgraph_store_put`` calls no function in its ``DO UPDATE SET``.

For Citus (issue 31), and the same on one server: Citus refuses an
``INSERT ... ON CONFLICT DO UPDATE`` on a distributed table whose ``SET``
calls a function that is not immutable ("functions used in the DO UPDATE
SET clause of INSERTs on distributed tables must be marked IMMUTABLE"), and
the put of 0018 asked whether the stored item had expired with ``now()``
there. The inserted row carries ``now()`` already (``EXCLUDED.updated_at``,
the transaction's start, as ``now()`` is), so the test reads it from there:
same answer, no function call. The rest of the function is 0018's.

Revision ID: 0033
Revises: 0032
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from memsvc.db.migrate import settings_for_migration

revision: str = "0033"
down_revision: str | None = "0032"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PUT = "langgraph_store_put"
EXPIRED_THEN = "i.expires_at <= now()"
EXPIRED_NOW = "i.expires_at <= EXCLUDED.updated_at"

# 0018's body, the expiry test aside ($1 tenant; items: $2 prefixes, $3 keys,
# $4 values, $5 TTLs in minutes; vectors: $6 prefixes, $7 keys, $8 fields,
# $9 embeddings).
PUT_BODY = """
BEGIN
    INSERT INTO {schema}.langgraph_store_items AS i
        (tenant_id, prefix, key, value, created_at, updated_at, expires_at, ttl_minutes)
    SELECT $1, p, k, v, now(), now(),
           CASE WHEN t IS NULL THEN NULL ELSE now() + t * interval '1 minute' END, t
    FROM unnest($2, $3, $4, $5) AS u(p, k, v, t)
    ON CONFLICT (tenant_id, prefix, key) DO UPDATE SET
        value = EXCLUDED.value,
        created_at = CASE WHEN {expired} THEN EXCLUDED.created_at
                          ELSE i.created_at END,
        updated_at = EXCLUDED.updated_at,
        expires_at = EXCLUDED.expires_at,
        ttl_minutes = EXCLUDED.ttl_minutes;
    DELETE FROM {schema}.langgraph_store_vectors AS v
    USING unnest($2, $3) AS u(p, k)
    WHERE v.tenant_id = $1 AND v.prefix = u.p AND v.key = u.k
      AND NOT EXISTS (
          SELECT 1 FROM unnest($6, $7, $8) AS n(p, k, f)
          WHERE n.p = v.prefix AND n.k = v.key AND n.f = v.field
      );
    INSERT INTO {schema}.langgraph_store_vectors AS v
        (tenant_id, prefix, key, field, embedding)
    SELECT $1, p, k, f, e FROM unnest($6, $7, $8, $9) AS u(p, k, f, e)
    ON CONFLICT (tenant_id, prefix, key, field) DO UPDATE SET embedding = EXCLUDED.embedding
    WHERE v.embedding IS DISTINCT FROM EXCLUDED.embedding;
END
"""


def _replace(expired: str) -> None:
    settings = settings_for_migration()
    schema = settings.db_schema
    body = PUT_BODY.format(schema=schema, expired=expired)
    op.execute(
        f"CREATE OR REPLACE FUNCTION {schema}.{PUT}(text, text[], text[], jsonb[], float8[], "
        f"text[], text[], text[], {settings.vector_type}[]) RETURNS void "
        f"LANGUAGE plpgsql VOLATILE AS $body${body}$body$"
    )


def upgrade() -> None:
    _replace(EXPIRED_NOW)


def downgrade() -> None:
    _replace(EXPIRED_THEN)
