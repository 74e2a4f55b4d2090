"""export / import: JSONL round trip, idempotent re-import, rejected lines, bulk index rebuild."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import asyncpg
import numpy as np
import pytest

from memsvc import HashingEmbedder, MemoryService, Scope
from memsvc.transfer.bulk import MEMORY_VECTOR_INDEX

from .conftest import Cli

MEMORY_ROWS = """
SELECT tenant_id, project_id, agent_id, session_id, id, key, content, content_hash, metadata,
       embedding::text AS embedding, importance, version, created_at, updated_at, expires_at,
       access_count, last_accessed_at, pinned, forgotten_at, reinforced_count,
       last_reinforced_at, content_unique
FROM memsvc.memories ORDER BY tenant_id, id"""
ASSEMBLY_ROWS = """
SELECT tenant_id, project_id, agent_id, session_id, id, name, description, metadata,
       member_count, embedded_count, centroid::text AS centroid, version, created_at, updated_at
FROM memsvc.assemblies ORDER BY tenant_id, id"""
MEMBER_ROWS = (
    "SELECT tenant_id, assembly_id, memory_id FROM memsvc.assembly_members ORDER BY 1, 2, 3"
)
CHECKPOINT_ROWS = """
SELECT tenant_id, project_id, agent_id, session_id, id, description, data, size_bytes, created_at
FROM memsvc.session_checkpoints ORDER BY tenant_id, id"""


async def _rows(dsn: str) -> dict[str, list[dict[str, object]]]:
    conn = await asyncpg.connect(dsn)
    try:
        return {
            name: [dict(r) for r in await conn.fetch(sql)]
            for name, sql in (
                ("memories", MEMORY_ROWS),
                ("assemblies", ASSEMBLY_ROWS),
                ("members", MEMBER_ROWS),
                ("checkpoints", CHECKPOINT_ROWS),
            )
        }
    finally:
        await conn.close()


async def _populate(service: MemoryService) -> None:
    rng = np.random.default_rng(7)
    session = Scope("acme", "bridge", "planner", "s-42")
    project = Scope("acme", "bridge")
    added = await service.memories.add_many(
        session,
        [
            {
                "content": f"fact {i} with unicode \u00e9\u4e2d and a newline\nhere",
                "embedding": rng.normal(size=384).astype(np.float32),
                "metadata": {"i": i, "tags": ["a", "b"], "nested": {"x": 1.5}},
                "importance": float(i % 10) / 10,
            }
            for i in range(30)
        ],
    )
    wide = await service.memories.add(project, "project-wide memory", metadata={"kind": "p"})
    await service.memories.add(Scope("other"), "no embedding here")  # embedder computes one
    await service.memories.put(session, "prefs/units", "metric", metadata={"v": 2})
    await service.memories.add(session, "expires soon", ttl=3600)
    # Pinned, and forgotten (under a policy): both survive the round trip.
    await service.memories.update(added[20].id, pinned=True)
    await service.policies.set(Scope("acme"), half_life=60)
    forgotten = await service.maintenance.forget(session, below=0.05)
    assert set(forgotten.ids) == {added[0].id, added[10].id}  # importance 0; 20 is pinned
    await service.policies.delete(Scope("acme"))
    # A near-duplicate merged (reinforced), and an exact copy kept with dedupe="off".
    said = await service.memories.add(project, "the bridge opens at six", dedupe="off")
    again = await service.memories.add(project, "the bridge opens at six", dedupe="off")
    assert again.id != said.id
    merged = await service.memories.add(project, "the bridge opens at six", dedupe="semantic")
    assert merged.merged and merged.id in (said.id, again.id)
    await service.assemblies.create(
        session, "first ten", description="d", memory_ids=[m.id for m in added[:10]] + [wide.id]
    )
    await service.assemblies.create(project, "empty one", metadata={"k": "v"})
    await service.checkpoints.create(session, {"draft": {"step": 1}, "list": [1, 2, 3]})
    await service.checkpoints.create(session, "a plain string", description="second")


async def test_export_then_import_into_a_fresh_database_reproduces_every_row(
    service: MemoryService, cli: Cli, memsvc_database_url: str, other_database: str,
    tmp_path: Path,
) -> None:
    await _populate(service)
    dump = tmp_path / "dump.jsonl"
    exported = await cli("export", str(dump))
    assert exported.exit_code == 0, exported.output
    assert "exported 36 memories, 2 assemblies, 2 checkpoints" in exported.output
    lines = [json.loads(line) for line in dump.read_text(encoding="utf-8").splitlines()]
    assert lines[0]["type"] == "header" and lines[0]["embedding_dim"] == 384
    assert {line["type"] for line in lines[1:-1]} == {"memory", "assembly", "checkpoint"}
    assert lines[-1]["type"] == "trailer" and lines[-1]["lines"] == len(lines) - 1

    imported = await cli("import", str(dump), dsn=other_database)
    assert imported.exit_code == 0, imported.output
    assert "memories: 36 inserted, 0 already present, 0 rejected" in imported.output
    source, copy = await _rows(memsvc_database_url), await _rows(other_database)
    assert copy == source

    events_before = await _count(other_database, "memory_events")
    again = await cli("import", str(dump), dsn=other_database)
    assert again.exit_code == 0, again.output
    assert "memories: 0 inserted, 36 already present, 0 rejected" in again.output
    assert "assemblies: 0 inserted, 2 already present" in again.output
    assert "checkpoints: 0 inserted, 2 already present" in again.output
    assert await _rows(other_database) == source
    assert await _count(other_database, "memory_events") == events_before


ANALYZED = """
SELECT relname, last_analyze IS NOT NULL AS analyzed FROM pg_stat_user_tables
WHERE schemaname = 'memsvc' AND relname IN ('memories', 'memory_events')"""


async def test_an_import_into_tables_never_analyzed_analyzes_them_after_its_first_batch(
    service: MemoryService, cli: Cli, other_database: str, tmp_path: Path
) -> None:
    # Without statistics the history trigger's cached plan reads the
    # tenant's whole history for each event the load writes.
    await _populate(service)
    dump = tmp_path / "dump.jsonl"
    assert (await cli("export", str(dump))).exit_code == 0
    conn = await asyncpg.connect(other_database)
    try:
        before = {r["relname"]: r["analyzed"] for r in await conn.fetch(ANALYZED)}
        assert before == {"memories": False, "memory_events": False}
        imported = await cli("import", str(dump), dsn=other_database)
        assert imported.exit_code == 0, imported.output
        after = {r["relname"]: r["analyzed"] for r in await conn.fetch(ANALYZED)}
        assert after == {"memories": True, "memory_events": True}
        assert await conn.fetchval(
            "SELECT reltuples FROM pg_class WHERE oid = 'memsvc.memory_events'::regclass"
        ) > 0
    finally:
        await conn.close()


async def test_export_of_one_scope_takes_it_and_what_is_under_it(
    service: MemoryService, cli: Cli, tmp_path: Path
) -> None:
    await _populate(service)
    dump = tmp_path / "bridge.jsonl"
    result = await cli("export", str(dump), "--tenant", "acme", "--project", "bridge")
    assert result.exit_code == 0, result.output
    memories = [
        json.loads(line) for line in dump.read_text().splitlines() if '"type":"memory"' in line
    ]
    assert len(memories) == 35
    assert {m["tenant"] for m in memories} == {"acme"}


async def test_import_reports_each_rejected_line_and_loads_the_rest(
    service: MemoryService, cli: Cli, tmp_path: Path
) -> None:
    existing = await service.memories.add(Scope("t"), "already here")
    good = {
        "type": "memory",
        "tenant": "t",
        "content": "fine",
        "id": "0190a5c0-0000-7000-8000-000000000001",
    }
    lines = [
        json.dumps(good),
        "{not json",
        json.dumps({**good, "id": "0190a5c0-0000-7000-8000-000000000002", "content": "x",
                    "embedding": [0.5, 0.5]}),
        json.dumps({**good, "id": "0190a5c0-0000-7000-8000-000000000003", "content": "y",
                    "content_hash": "sha256:beef"}),
        json.dumps({"type": "mystery"}),
        json.dumps({**good, "id": str(existing.id), "content": "a different text"}),
        json.dumps({**good, "id": "0190a5c0-0000-7000-8000-000000000004",
                    "content": "already here"}),
        json.dumps({**good, "id": "0190a5c0-0000-7000-8000-000000000005", "tenant": "../x\u0000"}),
        "",
        json.dumps(["an", "array"]),
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = await cli("import", str(path), "--allow-truncated")  # written by hand: no trailer
    assert result.exit_code == 1
    out = result.output
    assert "memories: 1 inserted, 0 already present, 5 rejected" in out
    assert "line 2: line: not valid JSON" in out
    assert "line 3: memory: embedding: has 2 dimensions, expected 384" in out
    assert "line 4: memory: content_hash: does not match the content" in out
    assert (
        "line 5: mystery: type: must be memory, assembly, checkpoint, store_item or header" in out
    )
    assert f"line 6: memory: id {existing.id} is already used by a different memory" in out
    assert (
        f"line 7: memory: the same content is already stored in this scope as memory {existing.id}"
        in out
    )
    assert "line 8: memory: scope.tenant: must not contain control characters or NUL" in out
    assert "line 10: line: line: must be a JSON object, not list" in out
    assert (await service.memories.get("0190a5c0-0000-7000-8000-000000000001")).content == "fine"


async def test_import_into_a_populated_store_copies_new_rows_and_stages_collisions(
    service: MemoryService, db: asyncpg.Connection, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    stored = await service.memories.add(Scope("t"), "already here")

    def write(name: str, contents: dict[int, str]) -> Path:
        path = tmp_path / name
        path.write_text("".join(
            json.dumps({"type": "memory", "tenant": "t", "content": content,
                        "id": f"0190a5c0-0000-7000-8000-{n:012d}"}) + "\n"
            for n, content in contents.items()
        ))
        return path

    fresh = write("fresh.jsonl", {n: f"new {n}" for n in range(1, 6)})
    # Files written by hand have no trailer: they load with allow_truncated.
    first = await service.maintenance.import_file(fresh, index_mode="keep", allow_truncated=True)
    assert (first.memories.inserted, first.rejected_total) == (5, 0)

    # New ids, one holding content already stored in the scope: the batch is
    # copied, refused by the unique index, and staged, which names the row.
    clash = write("clash.jsonl", {6: "new 6", 7: "already here", 8: "new 8"})
    with caplog.at_level(logging.INFO, logger="memsvc.transfer.loader"):
        second = await service.maintenance.import_file(
            clash, index_mode="keep", allow_truncated=True
        )
    assert any("direct COPY of a batch failed" in r.getMessage() for r in caplog.records)
    assert (second.memories.inserted, second.memories.rejected) == (2, 1)
    assert [str(p) for p in second.rejected] == [
        f"line 2: memory: the same content is already stored in this scope as memory {stored.id}"
    ]

    again = await service.maintenance.import_file(fresh, index_mode="keep", allow_truncated=True)
    assert (again.memories.inserted, again.memories.already_present) == (0, 5)
    rows = await db.fetch(
        "SELECT m.content, count(e.*) AS events FROM memsvc.memories m "
        "LEFT JOIN memsvc.memory_events e ON e.tenant_id = m.tenant_id AND e.memory_id = m.id "
        "AND e.kind = 'created' WHERE m.tenant_id = 't' GROUP BY m.content ORDER BY m.content"
    )
    assert [(r["content"], r["events"]) for r in rows] == [
        ("already here", 1), *((f"new {n}", 1) for n in (1, 2, 3, 4, 5, 6, 8))
    ]


async def test_bulk_import_rebuilds_the_vector_index_valid_and_searchable(
    service: MemoryService, cli: Cli, db: asyncpg.Connection, tmp_path: Path
) -> None:
    embedder = HashingEmbedder(384)
    path = tmp_path / "bulk.jsonl"
    with path.open("w") as out:
        for i in range(300):
            text = f"bulk memory about topic {i % 17} item {i}"
            vector = ",".join(f"{x:.9g}" for x in embedder.embed_one(text).tolist())
            out.write(json.dumps({"type": "memory", "tenant": "bulk", "content": text})[:-1]
                      + f',"embedding":[{vector}]}}\n')
    result = await cli("import", str(path), "--index", "rebuild", "--allow-truncated")
    assert result.exit_code == 0, result.output
    assert "vector index dropped for the load and rebuilt" in result.output
    valid = await db.fetchval(
        "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "WHERE c.relname = $1", MEMORY_VECTOR_INDEX
    )
    assert valid is True
    hits = await service.memories.search(
        Scope("bulk"), "topic 3 item 3", k=5, mode="vector", plan="index"
    )
    assert hits and hits[0].memory.content == "bulk memory about topic 3 item 3"
    # Ids without a UUID are derived from the content: a second run adds nothing.
    again = await cli("import", str(path), "--allow-truncated")
    assert "memories: 0 inserted, 300 already present, 0 rejected" in again.output


async def _count(dsn: str, table: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval(f"SELECT count(*) FROM memsvc.{table}"))
    finally:
        await conn.close()


VALIDITY_ROWS = """
SELECT id, content, valid_from, valid_to, supersedes, superseded_by, version
FROM memsvc.memories ORDER BY tenant_id, id"""


async def test_export_import_round_trips_valid_time_and_links(
    service: MemoryService, cli: Cli, memsvc_database_url: str, other_database: str,
    tmp_path: Path,
) -> None:
    from datetime import UTC, datetime

    scope = Scope("acme", "bridge")
    lisbon = await service.memories.add(
        scope, "Ana lives in Lisbon.", valid_from=datetime(2023, 1, 1, tzinfo=UTC)
    )
    porto = await service.memories.supersede(
        lisbon.id, "Ana lives in Porto.", valid_from=datetime(2024, 3, 1, tzinfo=UTC)
    )
    # The same content again, valid again: two rows of one text in one scope.
    await service.memories.supersede(
        porto.id, "Ana lives in Lisbon.", valid_from=datetime(2025, 2, 1, tzinfo=UTC)
    )
    project = await service.memories.add(scope, "Ana works on Apollo")
    await service.memories.invalidate(project.id)
    dump = tmp_path / "valid.jsonl"
    assert (await cli("export", str(dump))).exit_code == 0
    imported = await cli("import", str(dump), dsn=other_database)
    assert imported.exit_code == 0, imported.output
    assert "memories: 4 inserted, 0 already present, 0 rejected" in imported.output

    async def rows(dsn: str) -> list[dict[str, object]]:
        conn = await asyncpg.connect(dsn)
        try:
            return [dict(r) for r in await conn.fetch(VALIDITY_ROWS)]
        finally:
            await conn.close()

    source, copy = await rows(memsvc_database_url), await rows(other_database)
    assert copy == source
    assert sum(1 for r in copy if r["valid_to"] is None) == 1
