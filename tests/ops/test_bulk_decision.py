"""import --index auto: the vector index is dropped only for loads that insert enough new rows."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import asyncpg
import pytest

from memsvc import MemoryService
from memsvc.transfer import bulk
from memsvc.transfer.bulk import MEMORY_VECTOR_INDEX

from .conftest import Cli

# Small stand-ins for the production thresholds, so a few hundred rows are "bulk".
MIN_ROWS = 50

INDEX_OID = """
SELECT c.oid FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
JOIN pg_index AS i ON i.indexrelid = c.oid
WHERE n.nspname = 'memsvc' AND c.relname = $1 AND i.indisvalid"""


@pytest.fixture(autouse=True)
def small_bulk_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bulk, "BULK_MIN_ROWS", MIN_ROWS)
    monkeypatch.setattr(bulk, "NEW_ROWS_CHUNK", 40)  # several round trips per check


def _write(path: Path, start: int, count: int) -> Path:
    """Memories written by hand (no trailer: imported with allow_truncated)."""
    with path.open("w") as out:
        for i in range(start, start + count):
            out.write(json.dumps({
                "type": "memory",
                "tenant": "bulk",
                "id": str(uuid.UUID(int=i + 1)),
                "content": f"bulk memory {i}",
            }) + "\n")
    return path


async def _index_oid(db: asyncpg.Connection) -> int | None:
    oid: int | None = await db.fetchval(INDEX_OID, MEMORY_VECTOR_INDEX)
    return oid


async def test_reimporting_rows_already_present_keeps_the_index(
    cli: Cli, db: asyncpg.Connection, tmp_path: Path
) -> None:
    first = _write(tmp_path / "first.jsonl", 0, 200)
    loaded = await cli("import", str(first), "--allow-truncated")
    assert loaded.exit_code == 0, loaded.output
    assert "memories: 200 inserted" in loaded.output
    assert "vector index dropped for the load and rebuilt" in loaded.output  # empty table

    before = await _index_oid(db)
    assert before is not None
    again = await cli("import", str(first), "--allow-truncated")
    assert again.exit_code == 0, again.output
    assert "memories: 0 inserted, 200 already present" in again.output
    assert "0 memories not stored yet (200 stored): vector index kept in place" in again.output
    assert "dropped" not in again.output
    # The very same index (a rebuild would have made a new one): never dropped meanwhile.
    assert await _index_oid(db) == before

    # 200 present + 100 new: 300 lines would pass the line count, 100 new rows do not.
    mixed = _write(tmp_path / "mixed.jsonl", 100, 200)
    partly = await cli("import", str(mixed), "--allow-truncated")
    assert "memories: 100 inserted, 100 already present" in partly.output
    assert "100 memories not stored yet (200 stored): vector index kept" in partly.output
    assert await _index_oid(db) == before


async def test_a_large_new_load_still_rebuilds_the_index(
    service: MemoryService, cli: Cli, db: asyncpg.Connection, tmp_path: Path
) -> None:
    first = _write(tmp_path / "a.jsonl", 0, 100)
    assert (await cli("import", str(first), "--allow-truncated")).exit_code == 0
    before = await _index_oid(db)
    report = await service.maintenance.import_file(
        _write(tmp_path / "b.jsonl", 1000, 300), allow_truncated=True
    )
    assert report.memories.inserted == 300
    assert report.index_rebuilt
    assert report.index_decision.startswith("at least ")
    assert "(100 stored): vector index dropped for the load" in report.index_decision
    after = await _index_oid(db)
    assert after is not None and after != before  # dropped and built again, valid


async def test_count_new_memories_counts_only_absent_ids(
    service: MemoryService, db: asyncpg.Connection, tmp_path: Path
) -> None:
    await service.maintenance.import_file(
        _write(tmp_path / "a.jsonl", 0, 100), allow_truncated=True
    )
    present = [("bulk", uuid.UUID(int=i + 1)) for i in range(100)]
    absent = [("bulk", uuid.UUID(int=i + 1)) for i in range(500, 530)]
    other_tenant = [("elsewhere", uuid.UUID(int=1))]
    ids = present + absent + other_tenant
    assert await bulk.count_new_memories(db, "memsvc", ids, enough=10_000) == 31
    # Counting stops once the answer is known (after the chunk that passes `enough`).
    assert await bulk.count_new_memories(db, "memsvc", absent * 10, enough=30) == 40
