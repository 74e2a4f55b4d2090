"""stats and doctor: counts an operator can trust; problems found, repaired, reported."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest

from memsvc import MemoryService, Scope
from memsvc.core.time_limits import LATEST
from memsvc.db import migrate
from memsvc.testing.postgres import TestPostgres
from memsvc.transfer.bulk import ASSEMBLY_VECTOR_INDEX

from .conftest import Cli, run_cli


async def test_stats_counts_rows_per_tenant_and_level(
    service: MemoryService, cli: Cli, db: asyncpg.Connection
) -> None:
    await service.memories.add_many(Scope("acme"), ["t1", "t2"])
    await service.memories.add_many(Scope("acme", "p"), ["p1", "p2", "p3"])
    await service.memories.add(Scope("acme", "p", "a"), "a1")
    session = Scope("acme", "p", "a", "s")
    gone = await service.memories.add(session, "s1")
    await service.memories.add(Scope("other", session="s"), "skip-level session")
    await service.checkpoints.create(session, {"x": 1})
    await db.execute(
        "UPDATE memsvc.memories SET expires_at = now() - interval '1 minute' WHERE id = $1",
        gone.id,
    )
    stats = await service.maintenance.stats()
    acme = next(t for t in stats.tenants if t.tenant == "acme")
    assert (acme.memories, acme.tenant_only, acme.project, acme.agent, acme.session) == (
        7, 2, 3, 1, 1,
    )
    assert acme.expired == 1 and stats.expired == 1
    assert acme.checkpoints == 1 and acme.checkpoint_bytes == len('{"x":1}')
    other = next(t for t in stats.tenants if t.tenant == "other")
    assert other.session == 1
    assert {r.name for r in stats.relations} >= {"memories", "ix_memories_embedding_hnsw"}

    result = await cli("stats", "--tenant", "acme")
    assert result.exit_code == 0, result.output
    assert "expired memories waiting for gc: 1" in result.output
    assert "ix_memories_embedding_hnsw" in result.output
    assert "other" not in result.output.split("tables and indexes:")[0]


async def test_doctor_finds_and_repairs_a_broken_member_count(
    service: MemoryService, cli: Cli, db: asyncpg.Connection
) -> None:
    scope = Scope("acme", "p")
    memories = await service.memories.add_many(scope, ["one", "two", "three"])
    group = await service.assemblies.create(scope, "g", memory_ids=[m.id for m in memories])
    healthy = await cli("doctor")
    assert healthy.exit_code == 0, healthy.output

    await db.execute("UPDATE memsvc.assemblies SET member_count = 7 WHERE id = $1", group.id)
    found = await cli("doctor")
    assert found.exit_code == 1
    assert "[FAIL] assemblies: 1 inconsistent" in found.output
    assert "member_count 7 vs 3 members" in found.output

    repaired = await cli("doctor", "--repair")
    assert repaired.exit_code == 0, repaired.output
    assert f"fixed: recomputed assembly {group.id}" in repaired.output
    assert (await service.assemblies.get(group.id)).member_count == 3
    assert (await cli("doctor")).exit_code == 0


async def test_doctor_rebuilds_invalid_and_missing_indexes(
    service: MemoryService, cli: Cli, db: asyncpg.Connection
) -> None:
    await service.memories.add(Scope("t"), "something to index", metadata={"k": 1})
    # What a failed CREATE INDEX CONCURRENTLY leaves: an index marked invalid.
    await db.execute(
        "UPDATE pg_index SET indisvalid = false "
        "WHERE indexrelid = 'memsvc.ix_memories_metadata'::regclass"
    )
    await db.execute(f"DROP INDEX memsvc.{ASSEMBLY_VECTOR_INDEX}")
    found = await cli("doctor")
    assert found.exit_code == 1
    assert "ix_memories_metadata invalid" in found.output
    assert f"{ASSEMBLY_VECTOR_INDEX} missing" in found.output

    repaired = await cli("doctor", "--repair")
    assert repaired.exit_code == 0, repaired.output
    assert "rebuilt invalid index ix_memories_metadata" in repaired.output
    assert f"built missing index {ASSEMBLY_VECTOR_INDEX}" in repaired.output
    invalid = await db.fetchval(
        "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'memsvc' AND NOT i.indisvalid"
    )
    assert invalid == 0
    definition = await db.fetchval(
        "SELECT pg_get_indexdef($1::regclass)", f"memsvc.{ASSEMBLY_VECTOR_INDEX}"
    )
    assert "USING hnsw (centroid vector_cosine_ops)" in definition


async def test_doctor_reports_an_unmigrated_database_without_migrating_it(
    memsvc_postgres: TestPostgres,
) -> None:
    name = f"memsvc_doctor_{uuid.uuid4().hex[:8]}"
    dsn = await memsvc_postgres.create_database(name)
    try:
        result = await asyncio.to_thread(run_cli, dsn, "doctor", "--repair")
        assert result.exit_code == 1
        assert "[FAIL] pgvector: available" in result.output
        assert "run `memsvc migrate`" in result.output
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("CREATE EXTENSION vector")
            result = await asyncio.to_thread(run_cli, dsn, "doctor")
            assert result.exit_code == 1
            assert "[FAIL] migrations: schema memsvc is at no revision" in result.output
            assert await conn.fetchval("SELECT to_regclass('memsvc.memories')") is None
        finally:
            await conn.close()
    finally:
        await memsvc_postgres.drop_database(name)


async def test_views_for_psql_exist_and_return_rows(
    service: MemoryService, db: asyncpg.Connection
) -> None:
    session = Scope("acme", "p", "a", "s")
    memory = await service.memories.add(session, "remember the views")
    await service.memories.add(session, "short", ttl=3600)
    await service.checkpoints.create(session, {"k": "v"})
    await service.memories.delete(memory.id)
    stats = await db.fetch("SELECT * FROM memsvc.scope_stats")
    assert len(stats) == 1
    row = stats[0]
    assert (row["tenant_id"], row["session_id"], row["memories"], row["checkpoints"]) == (
        "acme", "s", 1, 1,
    )
    activity = await db.fetch("SELECT * FROM memsvc.recent_activity LIMIT 10")
    assert [r["kind"] for r in activity] == ["deleted", "created", "created"]
    assert activity[0]["content_preview"] == "remember the views"
    assert activity[0]["session_id"] == "s"  # from the deleted memory's prior values
    comments = await db.fetch(
        "SELECT c.relname, obj_description(c.oid, 'pg_class') AS comment FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'memsvc' AND c.relkind = 'v'"
    )
    assert {r["relname"] for r in comments} == {"scope_stats", "recent_activity"}
    assert all(r["comment"] for r in comments)


# A row each of what PostgreSQL stores but Python cannot read, as a table
# could hold them before revision 0024's constraints.
_HASH = "'sha256:' || encode(sha256(convert_to({0}, 'UTF8')), 'hex')"
POISON = [
    "INSERT INTO memsvc.memories (tenant_id, project_id, id, content, content_hash, expires_at) "
    f"VALUES ('acme', 'p', $1, 'far', {_HASH.format(repr('far'))}, '33000-01-01')",
    "INSERT INTO memsvc.memories (tenant_id, project_id, id, content, content_hash, created_at) "
    f"VALUES ('acme', 'p', $1, 'endless', {_HASH.format(repr('endless'))}, 'infinity')",
    "INSERT INTO memsvc.memories (tenant_id, project_id, id, content, content_hash, expires_at) "
    f"VALUES ('acme', 'p', $1, 'ancient', {_HASH.format(repr('ancient'))}, '-infinity')",
    "INSERT INTO memsvc.memory_events (tenant_id, project_id, memory_id, kind, version, prior) "
    "VALUES ('acme', 'p', $1, 'deleted', 1, "
    "'{\"content\": \"gone\", \"expires_at\": \"33000-01-01T00:00:00+00:00\"}')",
    "INSERT INTO memsvc.langgraph_store_items (tenant_id, prefix, key, value, expires_at, "
    "ttl_minutes) VALUES ('acme', 'ns', 'k', '{}', 'infinity', 1e12)",
]


async def test_the_database_refuses_times_python_cannot_read(
    service: MemoryService, db: asyncpg.Connection
) -> None:
    memory = await service.memories.add(Scope("acme", "p"), "kept")
    for column, value in [
        ("expires_at", "infinity"),
        ("expires_at", "33000-01-01"),
        ("created_at", "0001-01-01 00:00+00"),
        ("last_accessed_at", "-infinity"),
    ]:
        with pytest.raises(asyncpg.CheckViolationError):
            await db.execute(
                f"UPDATE memsvc.memories SET {column} = $1::text::timestamptz WHERE id = $2",
                value, memory.id,
            )
    with pytest.raises(asyncpg.CheckViolationError):
        await db.execute(POISON[-1])
    assert await service.memories.get(memory.id) == memory


async def test_doctor_finds_times_out_of_range_and_repair_makes_the_scope_readable(
    service: MemoryService, cli: Cli, db: asyncpg.Connection, memsvc_database_url: str
) -> None:
    scope = Scope("acme", "p")
    kept = await service.memories.add(scope, "kept")
    settings = service.settings
    await asyncio.to_thread(migrate.downgrade, settings, memsvc_database_url, "0020")
    far, endless, ancient, deleted = (uuid.uuid4() for _ in range(4))
    for statement, row_id in zip(POISON, [far, endless, ancient, deleted, None], strict=True):
        await db.execute(statement, *([] if row_id is None else [row_id]))
    # The upgrade keeps the rows, and its constraints stay NOT VALID.
    await asyncio.to_thread(migrate.upgrade, settings, memsvc_database_url, "head")

    found = await cli("doctor")
    assert found.exit_code == 1
    line = next(x for x in found.output.splitlines() if "time ranges" in x)
    assert line.startswith("[FAIL] time ranges: times Python cannot read")
    for column in (
        "memories.created_at: 1 rows", "memories.expires_at: 2 rows",
        "memory_events.prior_expires_at: 1 rows", "langgraph_store_items.expires_at: 1 rows",
        "langgraph_store_items.ttl_minutes: 1 rows", "ck_memories_expires_at_range",
    ):
        assert column in line

    repaired = await cli("doctor", "--repair")
    assert "[FIXD] time ranges" in repaired.output, repaired.output
    assert (
        "fixed: memories: 3 rows brought into range (created_at, expires_at)" in repaired.output
    )
    assert "fixed: validated constraint ck_memories_created_at_range" in repaired.output
    listed = {m.id: m for m in await service.memories.list(scope)}
    assert set(listed) == {kept.id, far, endless}  # "ancient" had expired
    assert listed[far].expires_at is None  # a far-future expiry means none
    assert listed[endless].created_at == LATEST
    hits = await service.memories.search(scope, "far", mode="text")
    assert [h.memory.id for h in hits] == [far]
    prior = await db.fetchval(
        "SELECT prior->>'expires_at' FROM memsvc.memory_events WHERE memory_id = $1", deleted
    )
    assert prior is None
    store = await db.fetchrow("SELECT expires_at, ttl_minutes FROM memsvc.langgraph_store_items")
    assert tuple(store) == (None, None)
    assert await db.fetchval(
        "SELECT count(*) FROM pg_constraint WHERE conname LIKE 'ck_%_range' AND NOT convalidated"
    ) == 0
    again = await cli("doctor")
    assert "[ok  ] time ranges: every stored time is within range" in again.output
