"""Prototype of the fixes described in docs/pending/citus-research.md (research only).

With ``MEMSVC_CITUS_PROTOTYPE=1`` the Citus tests run with these fixes in
place, to prove on a real cluster that they work: SQL changes applied by
hand to each distributed schema, and some of memsvc's statement builders and
methods replaced for the test session. Without it nothing here is used and
the tests exercise memsvc as it is. Delete this module once memsvc carries
the fixes itself; it is not how they should be written (see the report).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import asyncpg
import pytest

import memsvc.cli
import memsvc.testing.citus
from memsvc.errors import ConflictError, ValidationError
from memsvc.ids import parse_id
from memsvc.ops import doctor_queries, erasure_queries, gc_queries
from memsvc.ops.citus import citus_sql
from memsvc.ops.gc import GarbageCollector
from memsvc.repositories import base, langgraph_store_queries, memory_queries
from memsvc.repositories.memories import MemoryRepository
from memsvc.repositories.tenancy import current_tenant
from memsvc.settings import Settings

PROTOTYPE_ENV = "MEMSVC_CITUS_PROTOTYPE"

# ------------------------------------------------------------------ item 1


def fixed_citus_sql(settings: Settings) -> str:
    """The printed script, in one transaction, triggers allowed, no run_command_on_workers."""
    script = citus_sql(settings)
    # ALTER DATABASE ... SET is propagated to the workers by Citus itself.
    script = script[: script.index("SELECT run_command_on_workers(")]
    header_end = script.index("\n\n") + 2
    return (
        script[:header_end]
        + "BEGIN;\n"
        + "-- memsvc's tables carry row triggers; they only touch rows of their own tenant.\n"
        + "SET LOCAL citus.enable_unsafe_triggers = on;\n\n"
        + script[header_end:]
        + "COMMIT;\n"
    )


# ------------------------------------------------------------------ items 3 and 8

SCOPE = "tenant_id, project_id, agent_id, session_id"


def schema_fixes(schema: str) -> list[str]:
    """Row triggers instead of transition tables (item 3); keys from the row's node (item 8)."""
    statements = ["SET LOCAL citus.enable_unsafe_triggers = on"]
    new_scope = ", ".join(f"NEW.{c.strip()}" for c in SCOPE.split(","))
    old_scope = ", ".join(f"OLD.{c.strip()}" for c in SCOPE.split(","))
    for table, entity, version in (
        ("assemblies", "assembly", "version"),
        ("session_checkpoints", "checkpoint", "1"),
    ):
        new_version = "NEW.version" if version == "version" else "1"
        old_version = "OLD.version" if version == "version" else "1"
        statements += [
            f"""
CREATE OR REPLACE FUNCTION {schema}.record_{entity}_created() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.entity_events ({SCOPE}, entity, entity_id, kind, version, change_key)
    VALUES ({new_scope}, '{entity}', NEW.id, 'created', {new_version}, NEW.change_key);
    RETURN NULL;
END $$""",
            f"""
CREATE OR REPLACE FUNCTION {schema}.record_{entity}_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.entity_events ({SCOPE}, entity, entity_id, kind, version, change_key)
    VALUES ({old_scope}, '{entity}', OLD.id, 'deleted', {old_version},
            greatest(pg_current_xact_id(), OLD.change_key));
    RETURN NULL;
END $$""",
            f"DROP TRIGGER record_created ON {schema}.{table}",
            f"DROP TRIGGER record_deleted ON {schema}.{table}",
            f"CREATE TRIGGER record_created AFTER INSERT ON {schema}.{table} "
            f"FOR EACH ROW EXECUTE FUNCTION {schema}.record_{entity}_created()",
            f"CREATE TRIGGER record_deleted AFTER DELETE ON {schema}.{table} "
            f"FOR EACH ROW EXECUTE FUNCTION {schema}.record_{entity}_deleted()",
        ]
    statements += [
        f"""
CREATE OR REPLACE FUNCTION {schema}.record_assembly_updated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.entity_events ({SCOPE}, entity, entity_id, kind, version, change_key)
    VALUES ({new_scope}, 'assembly', NEW.id, 'updated', NEW.version, NEW.change_key);
    RETURN NULL;
END $$""",
        f"DROP TRIGGER record_updated ON {schema}.assemblies",
        f"CREATE TRIGGER record_updated AFTER UPDATE ON {schema}.assemblies FOR EACH ROW "
        f"WHEN (OLD.version IS DISTINCT FROM NEW.version) "
        f"EXECUTE FUNCTION {schema}.record_assembly_updated()",
        # Item 8: every change key is the id of the writing transaction on the
        # node that holds the row (a BEFORE trigger runs there), never the
        # coordinator's (Citus evaluates pg_current_xact_id() in a statement,
        # and a column default, on the coordinator).
        f"""
CREATE OR REPLACE FUNCTION {schema}.assign_change_key() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.change_key := greatest(pg_current_xact_id(), NEW.change_key);
    RETURN NEW;
END $$""",
    ]
    # Item 7 (second half): a memory's 'created' event written where the row
    # is, so that adding a memory is one plain INSERT, which Citus routes to
    # one shard (a CTE feeding the event's INSERT is not routed: it runs as
    # INSERT ... SELECT through the coordinator, by COPY, which row-level
    # security refuses).
    statements += [
        f"""
CREATE OR REPLACE FUNCTION {schema}.record_memory_created() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.memory_events ({SCOPE}, memory_id, kind, version, change_key)
    VALUES ({new_scope}, NEW.id, 'created', NEW.version, NEW.change_key);
    RETURN NULL;
END $$""",
        f"CREATE TRIGGER record_created AFTER INSERT ON {schema}.memories "
        f"FOR EACH ROW EXECUTE FUNCTION {schema}.record_memory_created()",
    ]
    for table, events in (
        ("memories", "INSERT OR UPDATE OF change_key"),
        ("memory_events", "INSERT"),
        ("assemblies", "INSERT"),
        ("session_checkpoints", "INSERT"),
        ("entity_events", "INSERT"),
    ):
        statements += [
            f"ALTER TABLE {schema}.{table} ALTER COLUMN change_key SET DEFAULT '1'::xid8",
            f"CREATE TRIGGER assign_change_key BEFORE {events} ON {schema}.{table} "
            f"FOR EACH ROW EXECUTE FUNCTION {schema}.assign_change_key()",
        ]
    return statements


async def apply_schema_fixes(dsn: str, schema: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            for statement in schema_fixes(schema):
                await conn.execute(statement)
    finally:
        await conn.close()


# ------------------------------------------------------------------ item 2


def fixed_upsert_by_key(original: Callable[[str, str], str]) -> Callable[[str, str], str]:
    def build(schema: str, scope_sql: str) -> str:
        sql = original(schema, scope_sql)
        # now() is evaluated for the proposed row (the column default) instead.
        sql = sql.replace("updated_at = now(),", "updated_at = EXCLUDED.updated_at,")
        # 'created' events come from the row trigger; this one writes updates.
        sql = sql.replace("    FROM up\n)", "    FROM up WHERE NOT up.inserted\n)")
        # Citus plans no correlated subquery over a CTE: the row's tenant is
        # $1 and "up" returns exactly one row.
        old = "WHERE am.tenant_id = up.tenant_id AND am.memory_id = up.id"
        assert old in sql
        return sql.replace(old, "WHERE am.tenant_id = $1 AND am.memory_id = (SELECT up.id FROM up)")

    return build


# memsvc's builders, kept before the session replaces them.
ORIGINAL_INSERT_MEMORY = memory_queries.insert_memory
ORIGINAL_INSERT_MANY = memory_queries.insert_many
ORIGINAL_HISTORY = memory_queries.history


def insert_memory(schema: str) -> str:
    """One plain INSERT (its 'created' event comes from the row trigger)."""
    sql = ORIGINAL_INSERT_MEMORY(schema)
    insert = sql[sql.index("INSERT INTO") : sql.index("), ev AS (")]
    return insert.strip()


def insert_many(schema: str, vector_type: str) -> str:
    """The batch insert without its event CTE (the row trigger writes 'created')."""
    sql = ORIGINAL_INSERT_MANY(schema, vector_type)
    return sql[: sql.index("), ev AS (")] + ")\nSELECT * FROM ins"


def history(schema: str, tenant_param: str | None) -> str:
    """In feed order: a trigger's event and a statement's take event ids from
    different nodes' sequences, while a memory's change keys never decrease."""
    sql = ORIGINAL_HISTORY(schema, tenant_param)
    assert sql.endswith("ORDER BY event_id")
    return sql.replace("ORDER BY event_id", "ORDER BY change_key, event_id")


# ------------------------------------------------------------------ item 4


async def delete_finding_the_tenant(
    original: Callable[..., Any],
    self: MemoryRepository,
    id: uuid.UUID | str,
    *,
    tenant: str | None = None,
    conn: asyncpg.Connection | None = None,
) -> bool:
    """Without a tenant: find it (a plain read, on every shard), then lock by tenant."""
    if tenant is None:
        memory_id = parse_id("id", id)
        sql = f"SELECT DISTINCT tenant_id FROM {self._schema}.memories WHERE id = $1"
        async with self._connection(conn, writes=False) as active:
            owners = [row["tenant_id"] for row in await active.fetch(sql, memory_id)]
        if len(owners) > 1:
            raise ConflictError(f"memory id {memory_id} exists in several tenants")
        if not owners:
            return False
        tenant = owners[0]
    result: bool = await original(self, id, tenant=tenant, conn=conn)
    return result


def tenants_with(schema: str, table: str, condition: str) -> str:
    """Up to ``$1`` tenants having rows to process (no lock: Citus cannot lock across shards)."""
    return f"SELECT DISTINCT tenant_id FROM {schema}.{table} WHERE {condition} LIMIT $1"


def lock_expired_of_tenant(schema: str) -> str:
    return gc_queries.lock_expired(schema).replace(
        "WHERE expires_at IS NOT NULL", "WHERE tenant_id = $2 AND expires_at IS NOT NULL"
    )


async def delete_expired_batch(self: GarbageCollector, batch_size: int) -> int:
    """One batch of expired memories, taken tenant by tenant (each lock routed to one shard)."""
    async with self._pool.acquire() as conn:
        tenants = await conn.fetch(
            tenants_with(
                self._schema, "memories", "expires_at IS NOT NULL AND expires_at <= now()"
            ),
            batch_size,
        )
    deleted = 0
    for row in tenants:
        async with self._pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch(
                lock_expired_of_tenant(self._schema), batch_size - deleted, row["tenant_id"]
            )
            deleted += await self._memories.delete_locked(conn, rows)
        if deleted >= batch_size:
            break
    return deleted


async def delete_expired_store_items(self: GarbageCollector, batch_size: int) -> int:
    async with self._pool.acquire() as conn:
        tenants = await conn.fetch(
            tenants_with(
                self._schema,
                "langgraph_store_items",
                "expires_at IS NOT NULL AND expires_at <= now()",
            ),
            batch_size,
        )
        deleted = 0
        for row in tenants:
            deleted += await conn.fetchval(
                langgraph_store_queries.sweep_expired(self._schema, "$2"),
                batch_size,
                row["tenant_id"],
            )
    return deleted


def persist_commit_times_of_tenant(schema: str) -> str:
    """gc's batch for tenant ``$2``: the commit time read by the batch's SELECT, set from it.

    Citus refuses a volatile function (pg_xact_commit_timestamp) in an
    UPDATE's SET; in the SELECT of the routed batch it runs on the worker,
    whose transaction ids the rows' xmin are.
    """
    return f"""
WITH batch AS (
    SELECT tenant_id, event_id, coalesce(pg_xact_commit_timestamp(xmin), at) AS committed
    FROM {schema}.memory_events
    WHERE tenant_id = $2 AND committed_at IS NULL
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), done AS (
    UPDATE {schema}.memory_events AS e SET committed_at = batch.committed
    FROM batch
    WHERE e.tenant_id = $2 AND e.tenant_id = batch.tenant_id AND e.event_id = batch.event_id
    RETURNING 1
)
SELECT count(*) FROM done"""


async def persist_commit_times(
    self: GarbageCollector, batch_size: int, report: Any, progress: Any
) -> None:
    async with self._pool.acquire() as conn:
        tenants = await conn.fetch(
            tenants_with(self._schema, "memory_events", "committed_at IS NULL"), 10_000
        )
        for row in tenants:
            while True:
                done = await conn.fetchval(
                    persist_commit_times_of_tenant(self._schema), batch_size, row["tenant_id"]
                )
                report.batches += 1
                report.commit_times_persisted += done
                if done < batch_size:
                    break


# ------------------------------------------------------------------ item 5


def stale_content_hashes(schema: str) -> str:
    """The doctor's check with the hash written out where used (no FROM-less LATERAL)."""
    actual = "'sha256:' || encode(sha256(convert_to(m.content, 'UTF8')), 'hex')"
    return f"""
SELECT m.tenant_id, m.id, m.content_hash AS stored, {actual} AS actual,
       (SELECT o.id FROM {schema}.memories AS o
        WHERE m.key IS NULL AND o.key IS NULL AND o.tenant_id = m.tenant_id
          AND o.project_id IS NOT DISTINCT FROM m.project_id
          AND o.agent_id IS NOT DISTINCT FROM m.agent_id
          AND o.session_id IS NOT DISTINCT FROM m.session_id
          AND o.content_hash = {actual} AND o.id <> m.id
        LIMIT 1) AS clash
FROM {schema}.memories AS m
WHERE m.content_hash <> {actual}
ORDER BY m.tenant_id, m.id
LIMIT $1"""


# ------------------------------------------------------------------ item 6


def uncorrelated_erase_histories(sql: str) -> str:
    """erase_histories with its two correlated NOT EXISTS as NOT IN over the batch's ids.

    Citus plans no correlated subquery whose outer FROM is a function
    (unnest) or a CTE. Both columns are NOT NULL, so NOT IN means NOT EXISTS.
    """
    doomed_old = sql[sql.index("WITH doomed AS (") : sql.index("), history AS (")]
    schema = sql[sql.index("FROM ", sql.index("NOT EXISTS")) + 5 :].split(".", 1)[0]
    doomed_new = f"""WITH doomed AS (
    SELECT * FROM unnest($1::text[], $2::uuid[]) AS d(tenant_id, id)
    WHERE (d.tenant_id, d.id) NOT IN (
        SELECT m.tenant_id, m.id FROM {schema}.memories AS m
        WHERE m.tenant_id = ANY($1::text[]) AND m.id = ANY($2::uuid[]))
"""
    tombstones_old = f"""    WHERE NOT EXISTS (
        SELECT 1 FROM {schema}.memory_events AS e
        WHERE e.tenant_id = l.tenant_id AND e.memory_id = l.memory_id AND e.kind = 'erased'
    )"""
    tombstones_new = f"""    WHERE (l.tenant_id, l.memory_id) NOT IN (
        SELECT e.tenant_id, e.memory_id FROM {schema}.memory_events AS e
        WHERE e.tenant_id = ANY($1::text[]) AND e.memory_id = ANY($2::uuid[])
          AND e.kind = 'erased'
    )"""
    assert tombstones_old in sql
    return sql.replace(doomed_old, doomed_new).replace(tombstones_old, tombstones_new)


# ------------------------------------------------------------------ item 7


def quote_literal(value: str) -> str:
    """A SQL string literal (standard_conforming_strings is on; ids hold no NUL)."""
    return "'" + value.replace("'", "''") + "'"


async def set_tenant_propagated(self: base.Repository, conn: asyncpg.Connection) -> None:
    """SET LOCAL instead of set_config(): Citus sends SET LOCAL on to the workers."""
    if not self._settings.row_level_security:
        return
    tenant = current_tenant.get()
    if tenant is None:
        raise ValidationError(
            "tenant", "row_level_security is on: pass the scope or tenant= of the rows"
        )
    await conn.execute(f"SET LOCAL memsvc.tenant = {quote_literal(tenant)}")


# ------------------------------------------------------------------ applying


def keys_from_the_rows_node(sql: str) -> str:
    """Statements give the previous key; the node's trigger adds its transaction id."""
    return sql.replace("greatest(pg_current_xact_id(), l.change_key)", "l.change_key").replace(
        "greatest(pg_current_xact_id(), change_key)", "change_key"
    )


def wrap(function: Callable[..., str], edit: Callable[[str], str]) -> Callable[..., str]:
    def build(*args: Any, **kwargs: Any) -> str:
        return edit(function(*args, **kwargs))

    return build


@pytest.fixture(scope="session")
def prototype_fixes() -> Iterator[None]:
    """Put the prototype in place for the session (see the module docstring)."""
    patch = pytest.MonkeyPatch()
    try:
        original_distribute = memsvc.testing.citus.distribute

        async def distribute(dsn: str, settings: Settings) -> None:
            await original_distribute(dsn, settings)
            await apply_schema_fixes(dsn, settings.db_schema)

        patch.setattr(memsvc.testing.citus, "distribute", distribute)
        patch.setattr(memsvc.cli, "citus_sql", fixed_citus_sql)
        patch.setattr(memsvc.testing.citus, "citus_sql", fixed_citus_sql)
        patch.setattr(memory_queries, "NEXT_CHANGE_KEY", "{row}.change_key")
        patch.setattr(
            memory_queries, "upsert_by_key", fixed_upsert_by_key(memory_queries.upsert_by_key)
        )
        patch.setattr(memory_queries, "insert_memory", insert_memory)
        patch.setattr(memory_queries, "insert_many", insert_many)
        patch.setattr(memory_queries, "history", history)
        patch.setattr(
            erasure_queries,
            "erase_memories",
            wrap(erasure_queries.erase_memories, keys_from_the_rows_node),
        )
        patch.setattr(
            erasure_queries,
            "erase_histories",
            wrap(
                erasure_queries.erase_histories,
                lambda sql: keys_from_the_rows_node(uncorrelated_erase_histories(sql)),
            ),
        )
        original_delete = MemoryRepository.delete

        async def delete(self: MemoryRepository, id: Any, **kwargs: Any) -> bool:
            return await delete_finding_the_tenant(original_delete, self, id, **kwargs)

        patch.setattr(MemoryRepository, "delete", delete)
        patch.setattr(GarbageCollector, "_delete_expired_batch", delete_expired_batch)
        patch.setattr(GarbageCollector, "_delete_expired_store_items", delete_expired_store_items)
        patch.setattr(GarbageCollector, "_persist_commit_times", persist_commit_times)
        patch.setattr(doctor_queries, "stale_content_hashes", stale_content_hashes)
        patch.setattr(base.Repository, "_set_tenant", set_tenant_propagated)
        yield
    finally:
        patch.undo()
