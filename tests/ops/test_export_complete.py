"""An export is complete or refused: trailer, write-then-rename, and --allow-truncated."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pytest

from memsvc import MemoryService, Scope
from memsvc.core.errors import ValidationError
from memsvc.transfer import records

from .conftest import Cli

SCOPE = Scope("acme", "bridge")


async def _populate(service: MemoryService, count: int) -> None:
    for start in range(0, count, 500):
        await service.memories.add_many(
            SCOPE, [f"fact number {i}" for i in range(start, min(count, start + 500))]
        )


async def _count(service: MemoryService) -> int:
    return await service.memories.count(Scope("acme"), include="descendants")


async def _export(cli: Cli, path: Path) -> list[bytes]:
    result = await cli("export", str(path))
    assert result.exit_code == 0, result.output
    return path.read_bytes().splitlines(keepends=True)


class Interrupted(Exception):
    """Stands for Ctrl-C (KeyboardInterrupt would end the test run itself)."""


def test_the_trailer_counts_and_hashes_every_line_before_it(tmp_path: Path) -> None:
    """The format, checked independently of memsvc's reader: sha256 of the bytes before it."""
    out = io.BytesIO()
    from memsvc.transfer.trailer import LineSink

    sink = LineSink(out)
    sink.write_lines(['{"type":"header"}', '{"a":"\u00e9"}'])
    sink.write_lines(['{"b":2}'])
    sink.write_trailer()
    *body, last = out.getvalue().splitlines(keepends=True)
    assert json.loads(last) == {
        "type": "trailer",
        "lines": 3,
        "sha256": hashlib.sha256(b"".join(body)).hexdigest(),
    }


async def test_an_export_ends_with_a_trailer_of_its_line_count_and_checksum(
    service: MemoryService, cli: Cli, tmp_path: Path
) -> None:
    await _populate(service, 30)
    lines = await _export(cli, tmp_path / "dump.jsonl")
    trailer = json.loads(lines[-1])
    assert trailer["type"] == "trailer"
    assert trailer["lines"] == len(lines) - 1 == 31  # header + 30 memories
    assert trailer["sha256"] == hashlib.sha256(b"".join(lines[:-1])).hexdigest()

    # A stream given to the API gets the trailer too.
    stream = io.StringIO()
    await service.maintenance.export(stream)
    *body, last = stream.getvalue().encode().splitlines(keepends=True)
    assert json.loads(last)["sha256"] == hashlib.sha256(b"".join(body)).hexdigest()


async def test_an_interrupted_export_leaves_the_target_as_it_was(
    service: MemoryService, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _populate(service, 1200)
    written = 0
    render = records.memory_line

    def interrupting(row: object) -> str:
        nonlocal written
        written += 1
        if written > 1000:  # two batches of lines are written by then
            raise Interrupted
        return render(row)  # type: ignore[arg-type]

    monkeypatch.setattr(records, "memory_line", interrupting)
    target = tmp_path / "dump.jsonl"
    with pytest.raises(Interrupted):
        await cli("export", str(target))
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []  # no temporary file left behind either

    # An earlier export at the target survives an interrupted one, byte for byte.
    target.write_text("an earlier export\n")
    written = 0
    with pytest.raises(Interrupted):
        await service.maintenance.export(target)
    assert target.read_text() == "an earlier export\n"
    assert list(tmp_path.iterdir()) == [target]

    monkeypatch.setattr(records, "memory_line", render)
    report = await service.maintenance.export(str(target))
    assert report.memories == 1200
    assert json.loads(target.read_bytes().splitlines()[-1])["lines"] == 1201
    assert list(tmp_path.iterdir()) == [target]


async def test_a_truncated_export_is_refused_naming_what_is_missing(
    service: MemoryService, cli: Cli, tmp_path: Path
) -> None:
    await _populate(service, 40)
    lines = await _export(cli, tmp_path / "full.jsonl")
    await service.memories.delete_scope(SCOPE)

    # What Ctrl-C left with the old export: complete lines, no trailer.
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(lines[:19]))
    refused = await cli("import", str(cut))
    assert refused.exit_code == 1
    assert "ValidationError: path: cut.jsonl: it has no trailer line (line count and " \
        "checksum) after its 19 lines: the export was cut short" in refused.output
    assert "pass --allow-truncated" in refused.output
    assert await _count(service) == 0  # nothing was written

    # Cut in the middle of a line.
    mid_line = tmp_path / "mid.jsonl"
    mid_line.write_bytes(b"".join(lines[:19]) + lines[19][:25])
    assert "no trailer" in (await cli("import", str(mid_line))).output

    # A line lost after the export, and a line changed: the trailer disagrees.
    lost = tmp_path / "lost.jsonl"
    lost.write_bytes(b"".join(lines[:5] + lines[6:]))
    result = await cli("import", str(lost))
    assert result.exit_code == 1
    assert "its trailer counts 41 lines but 40 precede it" in result.output
    changed = tmp_path / "changed.jsonl"
    changed.write_bytes(b"".join(lines).replace(b"fact number 7", b"fact number X"))
    result = await cli("import", str(changed))
    assert result.exit_code == 1
    assert "the checksum of its lines does not match its trailer's" in result.output
    assert await _count(service) == 0

    # The API refuses the same way, naming its own flag.
    with pytest.raises(ValidationError) as caught:
        await service.maintenance.import_file(cut)
    assert caught.value.field == "path"
    assert "no trailer" in caught.value.reason
    assert "pass allow_truncated=True" in caught.value.reason
    assert await _count(service) == 0

    # The complete file loads.
    complete = await cli("import", str(tmp_path / "full.jsonl"))
    assert complete.exit_code == 0, complete.output
    assert "memories: 40 inserted, 0 already present, 0 rejected" in complete.output


async def test_allow_truncated_loads_the_complete_lines_and_says_the_file_was_cut(
    service: MemoryService, cli: Cli, tmp_path: Path
) -> None:
    await _populate(service, 40)
    lines = await _export(cli, tmp_path / "full.jsonl")
    await service.memories.delete_scope(SCOPE)
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(lines[:19]) + lines[19][:25])

    result = await cli("import", str(cut), "--allow-truncated")
    assert "memories: 18 inserted, 0 already present, 0 rejected" in result.output
    assert "cut.jsonl: file: it has no trailer line" in result.output
    assert "line 20: line: not valid JSON" in result.output  # the line cut mid-way
    assert result.exit_code == 1
    assert await _count(service) == 18

    report = await service.maintenance.import_file(cut, allow_truncated=True)
    assert (report.memories.inserted, report.memories.already_present) == (0, 18)
    assert [p.kind for p in report.warnings] == ["file"]
    with pytest.raises(ValidationError) as caught:
        await service.maintenance.import_file(cut, allow_truncated="yes")  # type: ignore[arg-type]
    assert caught.value.field == "allow_truncated"


async def test_an_export_from_before_trailers_needs_allow_truncated(
    service: MemoryService, cli: Cli, tmp_path: Path
) -> None:
    await _populate(service, 10)
    lines = await _export(cli, tmp_path / "full.jsonl")
    await service.memories.delete_scope(SCOPE)
    older = tmp_path / "older.jsonl"
    older.write_bytes(b"".join(lines[:-1]))  # what memsvc wrote before trailers

    refused = await cli("import", str(older))
    assert refused.exit_code == 1
    assert "or by a memsvc older than export trailers" in refused.output
    assert "pass --allow-truncated" in refused.output
    loaded = await cli("import", str(older), "--allow-truncated")
    assert loaded.exit_code == 0, loaded.output
    assert "memories: 10 inserted" in loaded.output
