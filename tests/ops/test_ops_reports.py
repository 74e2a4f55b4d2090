"""What the ops commands say: the scope exported, rejects that add up, unknown estimates,
content edited behind memsvc's back."""

from __future__ import annotations

import json
import re
from pathlib import Path

import asyncpg
import pytest

from memsvc import MemoryService, Scope

from .conftest import Cli


async def test_export_names_the_selected_scope_and_warns_when_it_matched_nothing(
    service: MemoryService, cli: Cli, tmp_path: Path
) -> None:
    await service.memories.add(Scope("acme", session="s"), "in acme's session s")
    empty = await cli("export", str(tmp_path / "none.jsonl"), "--session", "s")
    assert empty.exit_code == 0, empty.output
    assert "selected scope: tenant 'default', session 's' and the scopes under it" in empty.output
    assert (
        "exported 0 memories, 0 assemblies, 0 checkpoints, 0 store items (0 rows)"
        in empty.output
    )
    assert "warning: the selection matched nothing" in empty.output

    found = await cli("export", str(tmp_path / "acme.jsonl"), "--tenant", "acme",
                      "--session", "s")
    assert "selected scope: tenant 'acme', session 's'" in found.output
    assert (
        "exported 1 memories, 0 assemblies, 0 checkpoints, 0 store items (1 rows)"
        in found.output
    )
    assert "warning" not in found.output


async def test_import_rejected_counts_add_up_to_the_listed_rejects(
    service: MemoryService, cli: Cli, tmp_path: Path
) -> None:
    good = {"type": "memory", "tenant": "t", "content": "fine"}
    lines = [
        json.dumps(good),
        "{not json",  # a line, not a memory
        json.dumps({"type": "mystery"}),  # of no known kind
        json.dumps(["an", "array"]),
        json.dumps({**good, "content": "x", "embedding": [0.5]}),  # a memory
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = await cli("import", str(path), "--allow-truncated")  # by hand: no trailer
    assert result.exit_code == 1
    out = result.stdout
    per_kind = sum(int(n) for n in re.findall(r"^\w+: \d+ inserted, \d+ already present, "
                                               r"(\d+) rejected$", out, re.MULTILINE))
    other = re.search(r"^other input: (\d+) rejected \(not a record\)$", out, re.MULTILINE)
    assert other is not None
    header = re.search(r"^(\d+) rejected:$", out, re.MULTILINE)
    assert header is not None
    listed = [line for line in out.splitlines() if re.match(r"^  line \d+: ", line)]
    assert per_kind + int(other.group(1)) == int(header.group(1)) == len(listed) == 4


async def test_stats_says_unknown_for_row_estimates_before_analyze(
    cli: Cli, db: asyncpg.Connection
) -> None:
    never = await db.fetchval(
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'memsvc' AND c.relkind = 'r' AND c.reltuples < 0"
    )
    if not never:
        pytest.skip("every table of this database was already analyzed")
    before = await cli("stats")
    table_part = before.output.split("tables and indexes:")[1]
    assert "unknown" in table_part
    assert not re.search(r"\s-1\s*$", table_part, re.MULTILINE)
    await db.execute("ANALYZE memsvc.memories")
    after = await cli("stats")
    memories_row = next(
        line for line in after.output.split("tables and indexes:")[1].splitlines()
        if line.startswith("memories ")
    )
    assert memories_row.split()[-1] == "0"


async def test_doctor_finds_content_edited_in_sql_and_repairs_its_hash(
    service: MemoryService, cli: Cli, db: asyncpg.Connection
) -> None:
    scope = Scope("acme", "p")
    edited = await service.memories.add(scope, "the original text")
    await db.execute(
        "UPDATE memsvc.memories SET content = 'text edited by hand' WHERE id = $1", edited.id
    )
    found = await cli("doctor")
    assert found.exit_code == 1
    assert "[FAIL] content hashes: 1 memories whose content_hash does not match" in found.output
    assert str(edited.id) in found.output

    repaired = await cli("doctor", "--repair")
    assert repaired.exit_code == 0, repaired.output
    assert f"fixed: recomputed the content_hash of memory {edited.id}" in repaired.output
    assert (await cli("doctor")).exit_code == 0
    # The hash is right again: dedupe finds the edited text instead of storing a copy.
    assert (await service.memories.add(scope, "text edited by hand")).id == edited.id


async def test_doctor_does_not_repair_a_hash_into_a_duplicate(
    service: MemoryService, cli: Cli, db: asyncpg.Connection
) -> None:
    scope = Scope("acme", "p")
    kept = await service.memories.add(scope, "alpha")
    copy = await service.memories.add(scope, "beta")
    stale_hash = await db.fetchval("SELECT content_hash FROM memsvc.memories WHERE id = $1",
                                   copy.id)
    await db.execute("UPDATE memsvc.memories SET content = 'alpha' WHERE id = $1", copy.id)
    result = await cli("doctor", "--repair")
    assert result.exit_code == 1
    assert f"memory {copy.id}: its content is now that of memory {kept.id}" in result.output
    assert "not recomputed" in result.output
    assert await db.fetchval(
        "SELECT content_hash FROM memsvc.memories WHERE id = $1", copy.id
    ) == stale_hash
