"""Migrations: one head, round trip, schema equals the metadata, offline SQL, guards."""

from __future__ import annotations

import asyncio
import os
import random
import string
import sys
import uuid

import asyncpg
import numpy as np
import pytest
from alembic import command
from alembic.script import ScriptDirectory

from memsvc import MemoryService, SchemaError, Settings
from memsvc.db import migrate
from memsvc.db.tables import build_metadata
from memsvc.testing.postgres import TestPostgres, settings_for_tests


@pytest.fixture
async def empty_database(memsvc_postgres: TestPostgres) -> str:
    name = f"memsvc_m_{uuid.uuid4().hex[:10]}"
    dsn = await memsvc_postgres.create_database(name)
    yield dsn  # type: ignore[misc]
    await memsvc_postgres.drop_database(name)


def test_migrations_have_a_single_head() -> None:
    assert len(ScriptDirectory(migrate.script_location()).get_heads()) == 1


async def test_upgrade_downgrade_upgrade_round_trip_matches_the_metadata(
    empty_database: str,
) -> None:
    settings = settings_for_tests(empty_database)
    revisions = [
        rev.revision
        for rev in reversed(list(ScriptDirectory(migrate.script_location()).walk_revisions()))
    ]

    def run() -> None:
        for revision in revisions:  # one step at a time, down and up again
            migrate.upgrade(settings, empty_database, revision)
            migrate.downgrade(settings, empty_database, "-1")
            migrate.upgrade(settings, empty_database, revision)
        # alembic check raises if the migrated schema differs from the metadata
        command.check(migrate.alembic_config(settings, empty_database))
        migrate.downgrade(settings, empty_database, "base")
        migrate.upgrade(settings, empty_database, "head")

    await asyncio.to_thread(run)
    conn = await asyncpg.connect(empty_database)
    try:
        tables = await conn.fetchval("SELECT count(*) FROM pg_tables WHERE schemaname = 'memsvc'")
        comments = await conn.fetchval(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'memsvc' AND c.relkind = 'r' AND obj_description(c.oid) IS NULL "
            "AND c.relname <> 'alembic_version'"
        )
    finally:
        await conn.close()
    # Every table of the metadata and alembic's version table, all inside the schema.
    assert tables == len(build_metadata(Settings()).tables) + 1
    assert comments == 0


UNCOMMENTED_VIEW_COLUMNS = """
SELECT c.relname || '.' || a.attname
FROM pg_attribute AS a
JOIN pg_class AS c ON c.oid = a.attrelid
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = 'memsvc' AND c.relkind = 'v' AND a.attnum > 0 AND NOT a.attisdropped
  AND col_description(c.oid, a.attnum) IS NULL
ORDER BY 1"""


async def test_every_view_column_is_commented_and_0006_round_trips(empty_database: str) -> None:
    settings = settings_for_tests(empty_database)

    async def uncommented() -> list[str]:
        conn = await asyncpg.connect(empty_database)
        try:
            return [row[0] for row in await conn.fetch(UNCOMMENTED_VIEW_COLUMNS)]
        finally:
            await conn.close()

    await asyncio.to_thread(migrate.upgrade, settings, empty_database, "0005")
    before = await uncommented()
    assert "scope_stats.live_memories" in before and "recent_activity.memory_id" in before
    await asyncio.to_thread(migrate.upgrade, settings, empty_database, "0006")
    assert await uncommented() == []  # `\d+` documents every column of both views
    await asyncio.to_thread(migrate.downgrade, settings, empty_database, "0005")
    assert await uncommented() == before  # 0004's own comments are back, nothing more
    await asyncio.to_thread(migrate.upgrade, settings, empty_database, "head")
    assert await uncommented() == []


def test_offline_sql_renders() -> None:
    sql = migrate.render_sql(settings_for_tests("postgresql://nowhere/x"))
    assert "CREATE EXTENSION IF NOT EXISTS vector" in sql
    assert "CREATE TABLE memsvc.memories" in sql
    assert "USING hnsw" in sql and "vector(384)" in sql.lower()


async def test_concurrent_upgrades_run_one_at_a_time(empty_database: str) -> None:
    """Three deploy pipelines (processes) upgrading at once: the advisory lock queues them."""
    env = {**os.environ, "MEMSVC_DATABASE_URL": empty_database}
    code = "from memsvc import Settings; from memsvc.db import migrate; migrate.upgrade(Settings())"
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            code,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(3)
    ]
    for process in processes:
        _, stderr = await process.communicate()
        assert process.returncode == 0, stderr.decode()
    conn = await asyncpg.connect(empty_database)
    try:
        assert await migrate.current_revision(conn, "memsvc") == migrate.head_revision()
    finally:
        await conn.close()


async def test_open_refuses_an_unmigrated_database(empty_database: str) -> None:
    with pytest.raises(SchemaError, match="memsvc migrate"):
        await MemoryService.open(settings_for_tests(empty_database))


async def test_auto_migrate_brings_the_schema_to_head(empty_database: str) -> None:
    settings = settings_for_tests(empty_database, auto_migrate=True)
    async with MemoryService.open(settings) as service:
        assert await service.memories.count(service_scope()) == 0


async def test_open_refuses_other_vector_settings(memsvc_database_url: str) -> None:
    for other in ({"embedding_dim": 768}, {"vector_type": "halfvec"}, {"distance": "l2"}):
        with pytest.raises(SchemaError, match="other vector settings"):
            await MemoryService.open(settings_for_tests(memsvc_database_url, **other))


def service_scope():  # type: ignore[no-untyped-def]
    from memsvc import Scope

    return Scope("t")


SYSTEM_POSTGRES = os.environ.get(
    "MEMSVC_TEST_NO_PGVECTOR_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


async def test_missing_pgvector_gives_a_clear_error() -> None:
    """A server without pgvector (the machine's system PostgreSQL, if it has none)."""
    try:
        conn = await asyncpg.connect(SYSTEM_POSTGRES, timeout=3)
    except (OSError, asyncpg.PostgresError) as exc:
        pytest.skip(f"no PostgreSQL without pgvector reachable at {SYSTEM_POSTGRES}: {exc}")
    try:
        available = await conn.fetchval(
            "SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'"
        )
        if available:
            pytest.skip("that server has pgvector; the error path cannot be shown on it")
        name = f"memsvc_nopgv_{uuid.uuid4().hex[:8]}"
        await conn.execute(f"CREATE DATABASE {name}")
    finally:
        await conn.close()
    dsn = SYSTEM_POSTGRES.rsplit("/", 1)[0] + "/" + name
    try:
        settings = settings_for_tests(dsn, auto_migrate=True)
        with pytest.raises(SchemaError, match="pgvector"):
            await MemoryService.open(settings)
    finally:
        conn = await asyncpg.connect(SYSTEM_POSTGRES)
        await conn.execute(f"DROP DATABASE {name} WITH (FORCE)")
        await conn.close()


async def test_history_from_before_0013_keeps_its_times_for_as_of_reads(
    empty_database: str,
) -> None:
    """Events older than commit-time tracking read at their ``at``, not at the upgrade."""
    from datetime import UTC, datetime

    from memsvc import Scope

    settings = settings_for_tests(empty_database, auto_migrate=True)
    scope = Scope("acme", "p")
    async with MemoryService.open(settings) as svc:
        memory = await svc.memories.add(scope, "first words")
        await svc.memories.update(memory.id, content="second words")
    await asyncio.to_thread(migrate.downgrade, settings, empty_database, "0012")
    conn = await asyncpg.connect(empty_database)
    try:
        # History written before commit times were tracked, with known times
        # (this rewrite gives the rows a new xmin, as 0011 does to old events).
        await conn.execute(
            "UPDATE memsvc.memory_events SET at = CASE version "
            "WHEN 1 THEN '2020-01-01T00:00:00Z'::timestamptz "
            "ELSE '2021-01-01T00:00:00Z'::timestamptz END WHERE memory_id = $1",
            memory.id,
        )
    finally:
        await conn.close()
    await asyncio.to_thread(migrate.upgrade, settings, empty_database, "head")
    async with MemoryService.open(settings) as svc:
        then = await svc.memories.get(memory.id, as_of=datetime(2020, 6, 1, tzinfo=UTC))
        assert then.content == "first words"
        assert (await svc.memories.get(memory.id)).content == "second words"


async def test_0028_and_0030_leave_checks_not_valid_on_populated_tables_and_0030_keeps_copies(
    empty_database: str,
) -> None:
    from memsvc import Scope

    settings = settings_for_tests(empty_database)
    await asyncio.to_thread(migrate.upgrade, settings, empty_database, "head")
    scope = Scope("t")
    async with MemoryService.open(settings) as service:
        kept = await service.memories.add(scope, "same text")
        copy = await service.memories.add(scope, "same text", dedupe="off")
    # A downgrade would delete the dedupe="off" copy without a history event: refused.
    with pytest.raises(Exception, match="dedupe"):
        await asyncio.to_thread(migrate.downgrade, settings, empty_database, "0029")
    async with MemoryService.open(settings) as service:
        assert await service.memories.count(scope) == 2
        await service.memories.delete(copy.id)
    await asyncio.to_thread(migrate.downgrade, settings, empty_database, "0027")
    await asyncio.to_thread(migrate.upgrade, settings, empty_database, "head")
    conn = await asyncpg.connect(empty_database)
    try:
        validated = dict(await conn.fetch(
            "SELECT conname, convalidated FROM pg_constraint WHERE conname = ANY($1::text[])",
            ["ck_memories_forgotten_at_range", "ck_memories_last_reinforced_at_range"],
        ))
        assert await conn.fetchval("SELECT count(*) FROM memsvc.memories") == 1
    finally:
        await conn.close()
    # The memories table had a row: not scanned under the lock, left to doctor --repair.
    assert validated == {
        "ck_memories_forgotten_at_range": False, "ck_memories_last_reinforced_at_range": False,
    }
    async with MemoryService.open(settings) as service:
        assert (await service.memories.get(kept.id)).content == "same text"


async def test_0034_keeps_vectors_in_their_rows_from_then_on(empty_database: str) -> None:
    from memsvc import Scope

    settings = settings_for_tests(empty_database)
    # Letters no compression shortens: the row passes 2 kB, and the vector
    # (1.5 kB) is the largest value PostgreSQL could move out of it.
    letters = random.Random(3)
    content = "".join(letters.choice(string.ascii_lowercase) for _ in range(1_000))
    vector = np.full(settings.embedding_dim, 1.0 / np.sqrt(settings.embedding_dim))

    await asyncio.to_thread(migrate.upgrade, settings, empty_database, "head")
    async with MemoryService.open(settings) as service:
        for name in ("before", "after"):
            await service.memories.add(Scope("t", name), content, embedding=vector)
    # The "before" row written again as 0033 stored it (the service needs head).
    await asyncio.to_thread(migrate.downgrade, settings, empty_database, "0033")
    conn = await asyncpg.connect(empty_database)
    try:
        await conn.execute(
            "UPDATE memsvc.memories SET embedding = embedding + embedding "
            "WHERE project_id = 'before'"
        )
    finally:
        await conn.close()
    await asyncio.to_thread(migrate.upgrade, settings, empty_database, "head")
    conn = await asyncpg.connect(empty_database)
    try:
        out_of_row = dict(await conn.fetch(
            "SELECT project_id, pg_column_toast_chunk_id(embedding) IS NOT NULL "
            "FROM memsvc.memories"
        ))
    finally:
        await conn.close()
    # Rows written before keep their vectors where they were.
    assert out_of_row == {"before": True, "after": False}
