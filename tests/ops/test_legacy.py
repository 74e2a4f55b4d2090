"""import-legacy: both file layouts arrive field by field; every broken file is named."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import asyncpg
import pytest

from memsvc import MemoryService, Scope
from memsvc.transfer.records import derived_id

from .conftest import FIXTURES, Cli

STORE = FIXTURES / "legacy_store"
SESSIONS = FIXTURES / "legacy_sessions"
U0 = uuid.UUID("550e8400-e29b-41d4-a716-446655440000")
U1 = uuid.UUID("550e8400-e29b-41d4-a716-446655440001")


def _file(name: str) -> dict[str, object]:
    return json.loads((STORE / "memories" / f"{name}.json").read_text())  # type: ignore[no-any-return]


async def _table_counts(db: asyncpg.Connection) -> tuple[int, ...]:
    return tuple(
        [
            await db.fetchval(f"SELECT count(*) FROM memsvc.{table}")
            for table in ("memories", "memory_events", "assemblies", "assembly_members")
        ]
    )


async def test_directory_store_arrives_field_by_field(
    service: MemoryService, cli: Cli, db: asyncpg.Connection
) -> None:
    result = await cli("import-legacy", str(STORE), "--tenant", "legacy")
    assert result.exit_code == 1, result.output  # broken files were skipped: not all arrived
    out = result.output
    for broken, reason in [
        ("memories/mem_empty.json", "empty file"),
        ("memories/mem_truncated.json", "truncated JSON"),
        ("memories/mem_array.json", "not a JSON object"),
        ("memories/mem_baddim.json", "embedding: has 3 dimensions, expected 384"),
        ("memories/mem_missing.json", "listed in memory_index.json as 'mem_missing' but the file"),
        ("assemblies/assembly_missing.json", "but the file is missing"),
        ("memories/mem_unlisted.json", "not listed in memory_index.json; imported anyway"),
    ]:
        assert any(broken in line and reason in line for line in out.splitlines()), broken
    assert "memories: 4 inserted, 0 already present" in out

    tenant = Scope("legacy")
    stored = {m.id: m for m in await service.memories.list(tenant, limit=100)}
    non_uuid = derived_id("legacy-memory", "legacy", "mem_7f3a9c21b4e0")
    unlisted = derived_id("legacy-memory", "legacy", "mem_unlisted")
    assert set(stored) == {U0, U1, non_uuid, unlisted}

    first = stored[U0]
    raw = _file(str(U0))
    assert first.content == raw["content"]
    assert first.embedding is not None
    assert first.embedding == pytest.approx(raw["embedding"], abs=1e-9)
    assert first.importance == pytest.approx(0.85)
    assert first.created_at == datetime(2025, 3, 15, 14, 32, 1, 123456, tzinfo=UTC)
    assert first.access_count == 3
    assert first.metadata == {
        "kind": "preference",
        "source": "chat",
        "legacy": {
            "id": str(U0),
            "path": f"memories/{U0}.json",
            # The index entry's fields the file's own values took precedence over.
            "index": {
                "created_at": "2025-03-15T14:32:01.123456",
                "content_hash": "sha256:a1b2c3...",
                "quickrecal_score": 0.5,
            },
        },
    }
    assert first.last_accessed_at == datetime(2025, 3, 16, 9, 0, tzinfo=UTC)
    assert stored[U1].updated_at == datetime(2025, 3, 17, 8, 0, tzinfo=UTC)
    clamped = stored[non_uuid]
    assert clamped.importance == 1.0  # "significance": 1.7, clamped
    assert clamped.created_at == datetime.fromtimestamp(1742212345.5, UTC)
    assert clamped.metadata["legacy"]["id"] == "mem_7f3a9c21b4e0"
    assert stored[unlisted].embedding is None

    group = await service.assemblies.get(derived_id("legacy-assembly", "legacy", "assembly_001"))
    assert group.name == "units and deadlines"
    assert group.description == "what the planner keeps in mind"
    members = {m.id for m in await service.assemblies.members(group.id)}
    assert members == {U0, non_uuid}  # mem_missing was never stored: reported, left out
    assert group.member_count == 2
    assert "member" in out and "is not a stored memory; left out" in out
    assert group.centroid is not None

    before = await _table_counts(db)
    again = await cli("import-legacy", str(STORE), "--tenant", "legacy")
    assert "memories: 0 inserted, 4 already present" in again.output
    assert "assemblies: 0 inserted, 1 already present" in again.output
    assert await _table_counts(db) == before


async def test_session_files_become_keyed_session_memories(
    service: MemoryService, cli: Cli, db: asyncpg.Connection
) -> None:
    result = await cli("import-legacy", str(SESSIONS), "--tenant", "acme")
    assert result.exit_code == 1, result.output
    out = result.output
    assert "empty.json: file: empty file" in out
    assert "truncated.json: file: truncated JSON" in out
    assert "not_object.json: file: not a JSON object (a str)" in out
    assert "orphan_notes.json: file: no session_id; using the file name 'orphan_notes'" in out
    assert "memories: 5 inserted" in out

    alpha = Scope("acme", session="alpha")
    units = await service.memories.get_by_key(alpha, "preferences/units")
    assert units.content == "metric"
    assert units.created_at == datetime(2025, 3, 15, 14, 32, 1, tzinfo=UTC)
    assert units.metadata == {
        "category": "preferences",
        "legacy": {"key": "preferences/units", "path": "session_alpha.json"},
    }
    assert units.id == derived_id("legacy-session", "acme", "alpha", "preferences/units")
    theme = await service.memories.get_by_key(alpha, "preferences/theme")
    assert json.loads(theme.content) == {"dark": True, "contrast": "high"}
    assert theme.metadata["source"] == "ui"
    assert (await service.memories.get_by_key(alpha, "facts/name")).content == "Ada"
    task = await service.memories.get_by_key(Scope("acme", session="beta"), "tasks/current")
    assert task.content == "write the quarterly report"
    assert task.importance == pytest.approx(0.9)
    orphan = Scope("acme", session="orphan_notes")
    assert (await service.memories.get_by_key(orphan, "notes/todo")).content == "call the vendor"

    before = await _table_counts(db)
    again = await cli("import-legacy", str(SESSIONS), "--tenant", "acme")
    assert "memories: 0 inserted, 5 already present" in again.output
    assert await _table_counts(db) == before


async def test_dry_run_reads_everything_and_writes_nothing(
    cli: Cli, db: asyncpg.Connection
) -> None:
    result = await cli("import-legacy", str(STORE), "--dry-run")
    assert "dry run: would load 4 memories and 1 assemblies" in result.output
    assert "memories/mem_truncated.json: memory: truncated JSON" in result.output
    assert await _table_counts(db) == (0, 0, 0, 0)
