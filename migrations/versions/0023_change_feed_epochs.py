"""Change feed epochs: a database restored into another cluster starts a new epoch.

The feed orders changes by ``change_key``, the writing transaction's id. A
database copied into another PostgreSQL cluster (``pg_dump`` /
``pg_restore``, a logical copy) keeps its keys while the new cluster hands
out transaction ids from its own counter, usually far lower: cursors would
see nothing new, and writes to rows written before the move (whose next key
is at least the row's last) would wait behind ids the cluster may take
billions of transactions to reach.

``schema_info`` row ``change_feed_epoch`` records the current epoch as JSON:
its ``id`` (random, named by every cursor), ``number``, the
``system_identifier`` of the cluster it belongs to (``pg_control_system()``:
set by initdb, the same on physical replicas and after a failover, different
in any other cluster), when it started, and whether cursors from before
epochs existed (``c1.``) belong to it (only the first epoch's do).

``change_feed_epoch()`` returns that row, first starting a new epoch when the
recorded cluster is not the one the database now lives in. Starting one,
with writes to the five keyed tables blocked for its duration:

- keys at or above the oldest running transaction id are lowered to 1 in
  memories, assemblies and session_checkpoints (new writes then take the
  new cluster's ids; 1 is the key 0011 gave rows older than the feed);
- if either ledger holds such a key, every event's key becomes 1, so the
  events from before the move come first, in event id order (the order of
  each row's versions), and a gc horizon in the old keys is reset.

It runs as the schema's owner (SECURITY DEFINER): the feed's runtime role
needs no rights on the tables it rewrites, but with row-level security
forced on the owner it refuses, naming what to do.

Revision ID: 0023
Revises: 0021
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from memsvc.db.migrate import settings_for_migration

revision: str = "0023"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

EPOCH_KEY = "change_feed_epoch"
# The order writers lock them in, so starting an epoch does not deadlock with them.
KEYED_TABLES = (
    "memories", "memory_events", "assemblies", "session_checkpoints", "entity_events"
)


def _function(schema: str) -> str:
    tables = ", ".join(f"{schema}.{table}" for table in KEYED_TABLES)
    guarded = " OR ".join(f"row_security_active('{schema}.{table}')" for table in KEYED_TABLES)
    return f"""
CREATE FUNCTION {schema}.change_feed_epoch() RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    live text := (SELECT system_identifier::text FROM pg_control_system());
    recorded text;
    boundary xid8;
    collapse boolean;
    epoch jsonb;
BEGIN
    SELECT value INTO recorded FROM {schema}.schema_info WHERE key = '{EPOCH_KEY}';
    IF recorded <> '' AND (recorded::jsonb)->>'system_identifier' = live THEN
        RETURN recorded;
    END IF;
    IF recorded IS NULL OR recorded = '' THEN
        -- The first epoch: cursors written before epochs existed belong to it.
        INSERT INTO {schema}.schema_info (key, value)
        VALUES ('{EPOCH_KEY}', jsonb_build_object(
            'id', substr(md5(gen_random_uuid()::text), 1, 12), 'number', 1,
            'system_identifier', live, 'started_at', now(), 'legacy_cursors', true)::text)
        ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value
            WHERE {schema}.schema_info.value = '';
        RETURN (SELECT value FROM {schema}.schema_info WHERE key = '{EPOCH_KEY}');
    END IF;
    IF {guarded} THEN
        RAISE EXCEPTION 'the change feed must start a new epoch (this database was '
            'restored into another PostgreSQL cluster), which rewrites change keys of '
            'every tenant, but row-level security is forced on the schema owner'
            USING ERRCODE = '42501',
                  HINT = 'run `memsvc doctor --repair` as a superuser or a role with BYPASSRLS';
    END IF;
    -- Writers finish first and wait meanwhile; a second caller waits here too.
    LOCK TABLE {tables} IN SHARE ROW EXCLUSIVE MODE;
    SELECT value INTO recorded FROM {schema}.schema_info WHERE key = '{EPOCH_KEY}' FOR UPDATE;
    IF (recorded::jsonb)->>'system_identifier' = live THEN
        RETURN recorded;  -- started by the caller we waited for
    END IF;
    boundary := pg_snapshot_xmin(pg_current_snapshot());
    -- created_xid (erasure's cut, migration 0021) is a transaction id too:
    -- one from the old cluster would look uncommitted to every snapshot.
    UPDATE {schema}.memories SET
        change_key = CASE WHEN change_key >= boundary THEN '1' ELSE change_key END,
        created_xid = CASE WHEN created_xid >= boundary THEN '1' ELSE created_xid END
    WHERE change_key >= boundary OR created_xid >= boundary;
    ALTER TABLE {schema}.assemblies DISABLE TRIGGER bump_change_key;
    UPDATE {schema}.assemblies SET
        change_key = CASE WHEN change_key >= boundary THEN '1' ELSE change_key END,
        created_xid = CASE WHEN created_xid >= boundary THEN '1' ELSE created_xid END
    WHERE change_key >= boundary OR created_xid >= boundary;
    ALTER TABLE {schema}.assemblies ENABLE TRIGGER bump_change_key;
    UPDATE {schema}.session_checkpoints SET
        change_key = CASE WHEN change_key >= boundary THEN '1' ELSE change_key END,
        created_xid = CASE WHEN created_xid >= boundary THEN '1' ELSE created_xid END
    WHERE change_key >= boundary OR created_xid >= boundary;
    collapse := EXISTS (SELECT 1 FROM {schema}.memory_events WHERE change_key >= boundary)
        OR EXISTS (SELECT 1 FROM {schema}.entity_events WHERE change_key >= boundary);
    IF collapse THEN
        UPDATE {schema}.memory_events SET change_key = '1' WHERE change_key <> '1';
        UPDATE {schema}.entity_events SET change_key = '1' WHERE change_key <> '1';
        UPDATE {schema}.schema_info SET value = 'c1.0.-1.0'
        WHERE key = 'change_feed_horizon' AND value <> '';
    END IF;
    epoch := jsonb_build_object(
        'id', substr(md5(gen_random_uuid()::text), 1, 12),
        'number', coalesce(((recorded::jsonb)->>'number')::int, 1) + 1,
        'system_identifier', live, 'started_at', now(), 'legacy_cursors', false,
        'previous', (recorded::jsonb)->>'id', 'keys_rewritten', collapse);
    UPDATE {schema}.schema_info SET value = epoch::text WHERE key = '{EPOCH_KEY}';
    RETURN epoch::text;
END $$"""


def upgrade() -> None:
    schema = settings_for_migration().db_schema
    op.execute(_function(schema))
    op.execute(
        f"COMMENT ON FUNCTION {schema}.change_feed_epoch() IS 'The change feed''s current "
        "epoch (JSON), first starting a new one if the database now lives in another cluster "
        "(see migration 0023).'"
    )
    op.execute(f"SELECT {schema}.change_feed_epoch()")


def downgrade() -> None:
    schema = settings_for_migration().db_schema
    op.execute(f"DROP FUNCTION {schema}.change_feed_epoch()")
    op.execute(f"DELETE FROM {schema}.schema_info WHERE key = '{EPOCH_KEY}'")
