"""import-legacy: no field of a legacy file is dropped silently; dry runs count what loads."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

from memsvc import MemoryService, Scope
from memsvc.transfer.records import derived_id

from .conftest import Cli

VECTOR = [0.1] * 384


def _store(root: Path, memories: dict[str, Any], assemblies: dict[str, Any],
           index_extra: dict[str, Any] | None = None) -> Path:
    (root / "memories").mkdir(parents=True)
    (root / "assemblies").mkdir()
    for name, body in memories.items():
        (root / "memories" / f"{name}.json").write_text(json.dumps(body))
    for name, body in assemblies.items():
        (root / "assemblies" / f"{name}.json").write_text(json.dumps(body))
    index = {
        "memories": {name: {"filepath": f"memories/{name}.json"} for name in memories},
        "assemblies": {name: {"filepath": f"assemblies/{name}.json"} for name in assemblies},
        **(index_extra or {}),
    }
    (root / "memory_index.json").write_text(json.dumps(index))
    return root


async def test_fields_without_a_column_are_kept_under_legacy(
    service: MemoryService, cli: Cli, tmp_path: Path
) -> None:
    store = _store(
        tmp_path / "store",
        {
            "m1": {"id": "m1", "content": "first", "embedding": VECTOR,
                   "last_access": "2025-04-01T10:00:00+00:00", "emotion": "calm"},
            "m2": {"id": "m2", "content": "second", "metadata": "not an object"},
            "m3": {"id": "m3", "content": "third", "metadata": {"legacy": "its own"}},
        },
        {
            "a1": {"assembly_id": "a1", "name": "group",
                   "memory_ids": ["m1", "m2", "does-not-exist"],
                   "keywords": ["units", "time"], "activation_level": 0.7,
                   "access_count": 4, "composite_embedding": VECTOR},
        },
        {"metadata": {"version": "1.2", "created": "2025-01-01"}},
    )
    result = await cli("import-legacy", str(store), "--tenant", "t")
    assert result.exit_code == 0, result.output
    out = result.output

    first = await service.memories.get(derived_id("legacy-memory", "t", "m1"))
    assert first.last_accessed_at == datetime(2025, 4, 1, 10, 0, tzinfo=UTC)  # `last_access`
    assert first.metadata["legacy"]["emotion"] == "calm"
    second = await service.memories.get(derived_id("legacy-memory", "t", "m2"))
    assert second.metadata["legacy"]["metadata"] == "not an object"
    third = await service.memories.get(derived_id("legacy-memory", "t", "m3"))
    assert third.metadata["legacy"] == "its own"
    assert third.metadata["memsvc_legacy"] == {"id": "m3", "path": "memories/m3.json"}

    group = await service.assemblies.get(derived_id("legacy-assembly", "t", "a1"))
    legacy = group.metadata["legacy"]
    assert legacy["keywords"] == ["units", "time"]
    assert legacy["activation_level"] == 0.7
    assert legacy["access_count"] == 4
    assert legacy["composite_embedding"] == VECTOR
    assert group.member_count == 2

    # The member that does not exist is named as the file names it, not by a derived uuid.
    missing = derived_id("legacy-memory", "t", "does-not-exist")
    assert "member does-not-exist is not a stored memory; left out" in out
    assert str(missing) not in out
    # The index file's own metadata block belongs to no record: it is reported.
    assert "memory_index.json: file: fields metadata not imported:" in out
    assert '"version": "1.2"' in out


async def test_dry_run_counts_what_the_real_run_loads(
    cli: Cli, db: asyncpg.Connection, tmp_path: Path
) -> None:
    store = _store(
        tmp_path / "store",
        {
            "a": {"id": "a", "content": "same text"},
            "b": {"id": "b", "content": "same text"},  # same content, same scope
            "c": {"id": "a", "content": "other text"},  # the id of "a" again
            "d": {"id": "d", "content": "unique"},
        },
        {
            "g1": {"assembly_id": "g1", "name": "group", "memory_ids": ["a"]},
            "g2": {"assembly_id": "g2", "name": "group", "memory_ids": ["d"]},  # name taken
        },
    )
    dry = await cli("import-legacy", str(store), "--tenant", "t", "--dry-run")
    assert "dry run: would load 2 memories and 1 assemblies" in dry.output
    assert "2 memories and 1 assemblies in the input duplicate an earlier one" in dry.output
    assert await db.fetchval("SELECT count(*) FROM memsvc.memories") == 0

    real = await cli("import-legacy", str(store), "--tenant", "t")
    assert "memories: 2 inserted" in real.output
    assert "assemblies: 1 inserted" in real.output
    assert await db.fetchval("SELECT count(*) FROM memsvc.memories") == 2


async def test_strip_nul_imports_text_with_nul_bytes(
    service: MemoryService, cli: Cli, tmp_path: Path
) -> None:
    store = _store(
        tmp_path / "store",
        {"n": {"id": "n", "content": "before\u0000after", "metadata": {"k": "v\u0000"}},
         "ok": {"id": "ok", "content": "clean"}},
        {},
    )
    refused = await cli("import-legacy", str(store), "--tenant", "t")
    assert refused.exit_code == 1
    assert "memories/n.json: memory: content:" in refused.output
    assert "--strip-nul imports it without them" in refused.output
    assert await service.memories.count(Scope("t")) == 1

    stripped = await cli("import-legacy", str(store), "--tenant", "t", "--strip-nul")
    assert stripped.exit_code == 0, stripped.output
    assert "memories/n.json: memory: NUL characters removed (--strip-nul)" in stripped.output
    memory = await service.memories.get(derived_id("legacy-memory", "t", "n"))
    assert memory.content == "beforeafter"
    assert memory.metadata["k"] == "v"


async def test_session_file_fields_are_kept(
    service: MemoryService, cli: Cli, tmp_path: Path
) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({
        "session_id": "s1", "user": "ada", "created": "2025-01-01",
        "memories": {"notes": {"todo": {"value": "call", "timestamp": "2025-01-02T00:00:00"}}},
    }))
    result = await cli("import-legacy", str(path), "--tenant", "t")
    assert result.exit_code == 0, result.output
    memory = await service.memories.get_by_key(Scope("t", session="s1"), "notes/todo")
    assert memory.metadata["legacy"]["session"] == {"user": "ada", "created": "2025-01-01"}
