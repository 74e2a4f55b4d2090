"""An index an interrupted build left invalid is rebuilt by whatever finds it.

The interruption is real: an import rebuilding the vector index is cancelled
while ``CREATE INDEX CONCURRENTLY`` runs (held at its last wait by an open
snapshot), which leaves the index invalid, as Ctrl-C did.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg
import pytest

from memsvc import MemoryService, Scope
from memsvc.testing.postgres import settings_for_tests
from memsvc.transfer.bulk import ASSEMBLY_VECTOR_INDEX, MEMORY_VECTOR_INDEX

from .conftest import Cli, open_service

VALID = """
SELECT i.indisvalid FROM pg_index AS i
WHERE i.indexrelid = to_regclass('memsvc.' || $1)"""
BUILDING = "SELECT count(*) FROM pg_stat_progress_create_index"


@asynccontextmanager
async def _old_snapshot(dsn: str) -> AsyncIterator[None]:
    """A transaction holding a snapshot: CREATE INDEX CONCURRENTLY waits for it to end."""
    conn = await asyncpg.connect(dsn)
    transaction = conn.transaction(isolation="repeatable_read")
    await transaction.start()
    await conn.fetchval("SELECT 1")
    try:
        yield
    finally:
        await transaction.rollback()
        await conn.close()


async def _until(db: asyncpg.Connection, condition: str, *args: object) -> None:
    for _ in range(600):
        if await db.fetchval(condition, *args):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never true: {condition}")


async def _export(service: MemoryService, path: Path, rows: int = 200) -> Path:
    await service.memories.add_many(Scope("bulk"), [f"bulk fact {i}" for i in range(rows)])
    with path.open("w") as out:
        await service.maintenance.export(out)
    return path


async def _interrupt_a_rebuild(
    service: MemoryService, db: asyncpg.Connection, dsn: str, path: Path
) -> None:
    """Cancel an import while it builds the vector index again (what Ctrl-C did)."""
    async with _old_snapshot(dsn):
        load = asyncio.create_task(service.maintenance.import_file(path, index_mode="rebuild"))
        await _until(db, f"SELECT ({BUILDING}) > 0 AND NOT ({VALID})", MEMORY_VECTOR_INDEX)
        load.cancel()
        await asyncio.gather(load, return_exceptions=True)
        await _until(db, f"SELECT ({BUILDING}) = 0")
    assert await db.fetchval(VALID, MEMORY_VECTOR_INDEX) is False


async def _invalidate(db: asyncpg.Connection, name: str) -> None:
    # What a failed CREATE INDEX CONCURRENTLY leaves (quicker than failing one).
    await db.execute(
        f"UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'memsvc.{name}'::regclass"
    )


async def test_rerunning_an_import_cut_short_while_rebuilding_rebuilds_the_index(
    service: MemoryService, cli: Cli, db: asyncpg.Connection, memsvc_database_url: str,
    tmp_path: Path,
) -> None:
    path = await _export(service, tmp_path / "dump.jsonl")
    await _interrupt_a_rebuild(service, db, memsvc_database_url, path)

    again = await cli("import", str(path))
    assert again.exit_code == 0, again.output
    assert (
        f"index {MEMORY_VECTOR_INDEX} is invalid (an index build was interrupted): "
        "rebuilding it" in again.stderr
    )
    assert "memories: 0 inserted, 200 already present" in again.stdout
    assert await db.fetchval(VALID, MEMORY_VECTOR_INDEX) is True
    hits = await service.memories.search(Scope("bulk"), "bulk fact 7", k=1, mode="vector",
                                         plan="index")
    assert hits[0].memory.content == "bulk fact 7"


async def test_an_import_on_an_open_service_rebuilds_an_invalid_index_and_reports_it(
    service: MemoryService, db: asyncpg.Connection, tmp_path: Path
) -> None:
    path = await _export(service, tmp_path / "dump.jsonl")
    await _invalidate(db, MEMORY_VECTOR_INDEX)
    report = await service.maintenance.import_file(path)  # auto: 200 rows would keep it
    assert report.index_decision == (
        f"index {MEMORY_VECTOR_INDEX} is invalid (an index build was interrupted): "
        "dropped for the load"
    )
    assert report.index_rebuilt
    assert await db.fetchval(VALID, MEMORY_VECTOR_INDEX) is True

    # keep: the index is not dropped for the load, but an invalid one is rebuilt first.
    await _invalidate(db, MEMORY_VECTOR_INDEX)
    await _invalidate(db, "ix_memories_metadata")
    kept = await service.maintenance.import_file(path, index_mode="keep")
    assert not kept.index_rebuilt
    assert [line.split(":")[0] for line in kept.index_repairs] == [
        "index ix_memories_embedding_hnsw is invalid (an index build was interrupted)",
        "index ix_memories_metadata is invalid (an index build was interrupted)",
    ]
    assert all(line.endswith("; it is valid") for line in kept.index_repairs)
    assert await db.fetchval(VALID, MEMORY_VECTOR_INDEX) is True
    assert await db.fetchval(VALID, "ix_memories_metadata") is True


async def test_opening_the_service_rebuilds_an_invalid_index_with_a_warning(
    service: MemoryService, db: asyncpg.Connection, memsvc_database_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await service.memories.add_many(Scope("t"), [f"fact {i}" for i in range(20)])
    await _invalidate(db, MEMORY_VECTOR_INDEX)
    await db.execute(f"DROP INDEX memsvc.{ASSEMBLY_VECTOR_INDEX}")  # a bulk load's leftover
    with caplog.at_level(logging.WARNING, logger="memsvc"):
        reopened = await open_service(memsvc_database_url)
    await reopened.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"index {MEMORY_VECTOR_INDEX} is invalid (an index build was interrupted): rebuilding "
        "it (searches use exact scans until it is done)",
        f"index {ASSEMBLY_VECTOR_INDEX} is missing (a bulk load was interrupted): "
        "rebuilding it (searches use exact scans until it is done)",
    ]
    assert await db.fetchval(VALID, MEMORY_VECTOR_INDEX) is True
    assert await db.fetchval(VALID, ASSEMBLY_VECTOR_INDEX) is True


async def test_opening_with_rebuild_invalid_indexes_false_leaves_it_to_the_doctor(
    db: asyncpg.Connection, memsvc_database_url: str, cli: Cli
) -> None:
    await _invalidate(db, MEMORY_VECTOR_INDEX)
    svc = await MemoryService.open(
        settings_for_tests(memsvc_database_url), rebuild_invalid_indexes=False
    )
    await svc.close()
    assert await db.fetchval(VALID, MEMORY_VECTOR_INDEX) is False
    found = await cli("doctor")  # reports it, and repairs only with --repair
    assert found.exit_code == 1
    assert f"{MEMORY_VECTOR_INDEX} invalid" in found.output
    assert await db.fetchval(VALID, MEMORY_VECTOR_INDEX) is False


async def test_migrate_rebuilds_an_invalid_index_and_says_so(
    cli: Cli, db: asyncpg.Connection
) -> None:
    await _invalidate(db, MEMORY_VECTOR_INDEX)
    result = await cli("migrate")
    assert result.exit_code == 0, result.output
    assert "schema memsvc is at head" in result.stdout
    assert (
        f"index {MEMORY_VECTOR_INDEX} is invalid (an index build was interrupted): rebuilt in"
        in result.stdout
    )
    assert await db.fetchval(VALID, MEMORY_VECTOR_INDEX) is True
    quiet = await cli("migrate")
    assert quiet.stdout.strip() == "schema memsvc is at head"


async def test_an_index_another_session_is_building_is_left_alone(
    service: MemoryService, db: asyncpg.Connection, memsvc_database_url: str
) -> None:
    from memsvc.transfer.index_repair import find_broken_indexes

    await db.execute("DROP INDEX memsvc.ix_memories_metadata")
    builder = await asyncpg.connect(memsvc_database_url)
    try:
        async with _old_snapshot(memsvc_database_url):
            build = asyncio.create_task(builder.execute(
                "CREATE INDEX CONCURRENTLY ix_memories_metadata ON memsvc.memories "
                "USING gin (metadata)"
            ))
            await _until(db, f"SELECT ({BUILDING}) > 0 AND NOT ({VALID})", "ix_memories_metadata")
            assert await find_broken_indexes(db, service.settings) == []
            opened = await open_service(memsvc_database_url)  # must not drop it
            await opened.close()
        await build
    finally:
        await builder.close()
    assert await db.fetchval(VALID, "ix_memories_metadata") is True
