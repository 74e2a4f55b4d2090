"""Progress: a live display in a terminal, throttled timestamped lines elsewhere, and
nothing at all before the arguments are validated."""

from __future__ import annotations

import asyncio
import io
import json
import os
import pty
import re
import sys
import time
from pathlib import Path

import pytest

from memsvc import MemoryService, Scope
from memsvc.progress import LineProgress, ProgressReporter, RichProgress, human_amount

from .conftest import Cli

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_are_timestamped_and_at_most_one_per_interval() -> None:
    out, clock = io.StringIO(), FakeClock()
    progress = LineProgress(out, interval=5.0, clock=clock, heartbeat=False)
    assert isinstance(progress, ProgressReporter)
    progress.start("importing dump.jsonl", total=4096, unit="bytes")
    for _ in range(40):  # 4 s of steady progress: no line
        clock.now += 0.1
        progress.advance(10)
    assert len(out.getvalue().splitlines()) == 1
    clock.now += 1.0  # 5 s since the first line
    progress.advance(96)
    progress.advance(1)  # right after a line: none
    clock.now += 10
    progress.done()
    lines = out.getvalue().splitlines()
    assert all(STAMP.match(line) for line in lines)
    assert lines[0].endswith("importing dump.jsonl (4.0 KiB)")
    assert lines[1].endswith("importing dump.jsonl: 496 B of 4.0 KiB (12%)")
    assert lines[2].endswith("importing dump.jsonl: 497 B of 4.0 KiB (12%), done in 15.0 s")
    assert len(lines) == 3


def test_quick_steps_share_the_interval_and_a_silent_step_still_reports() -> None:
    out, clock = io.StringIO(), FakeClock()
    progress = LineProgress(out, interval=5.0, clock=clock, heartbeat=False)
    progress.start("gc: deleting expired memories")
    progress.advance(500)
    clock.now += 0.5
    progress.start("gc: pruning checkpoints past retention", total=3, unit="sessions")
    progress.advance(3)
    clock.now += 0.5
    progress.start("building index ix_memories_embedding_hnsw", total=None)
    assert len(out.getvalue().splitlines()) == 1  # three steps in one second: one line
    for _ in range(3):  # the build does not advance: the heartbeat speaks for it
        clock.now += 2.0
        progress.tick()
    progress.close()
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("gc: deleting expired memories")
    assert lines[1].endswith("building index ix_memories_embedding_hnsw")
    assert len(lines) == 2
    assert human_amount(1234567, "rows") == "1,234,567 rows"


def test_the_heartbeat_thread_reports_a_step_that_does_not_advance() -> None:
    out = io.StringIO()
    with LineProgress(out, interval=0.05) as progress:
        progress.start("starting the embedded PostgreSQL", total=None)
        deadline = time.monotonic() + 5
        while len(out.getvalue().splitlines()) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 3
    assert "starting the embedded PostgreSQL: running for" in lines[1]


def test_rich_display_shows_each_step() -> None:
    out = io.StringIO()
    with RichProgress(console_file=out, force_terminal=True) as progress:
        progress.start("exporting", total=10)
        progress.advance(10)
        progress.start("building index ix_memories_embedding_hnsw over 10 rows", total=None)
    text = out.getvalue()
    assert "exporting" in text and "building index" in text
    assert "\x1b[" in text  # drawn with terminal control sequences


async def _populate(service: MemoryService, rows: int = 20) -> None:
    await service.memories.add_many(Scope("acme"), [f"fact {i}" for i in range(rows)])


async def test_commands_outside_a_terminal_print_timestamped_progress_lines(
    service: MemoryService, cli: Cli, tmp_path: Path
) -> None:
    await _populate(service)
    dump = tmp_path / "dump.jsonl"
    exported = await cli("export", str(dump))
    assert exported.exit_code == 0, exported.output
    progress_lines = exported.stderr.splitlines()
    assert progress_lines and all(STAMP.match(line) for line in progress_lines)
    assert any(line.endswith("exporting (20 rows)") for line in progress_lines)
    assert "exported 20 memories" in exported.stdout  # the report stays on stdout

    imported = await cli("import", str(dump))
    assert imported.exit_code == 0, imported.output
    assert any("importing dump.jsonl" in line for line in imported.stderr.splitlines())
    assert all(STAMP.match(line) for line in imported.stderr.splitlines())

    collected = await cli("gc")
    assert collected.exit_code == 0, collected.output
    assert any("gc: deleting expired memories" in line for line in collected.stderr.splitlines())


async def test_nothing_is_printed_before_the_arguments_are_validated(
    cli: Cli, tmp_path: Path
) -> None:
    header = {"type": "header", "format": 1, "embedding_dim": 768, "vector_type": "vector",
              "distance": "cosine"}
    other_dim = tmp_path / "other.jsonl"
    other_dim.write_text(json.dumps(header) + "\n")
    legacy = tmp_path / "legacy.json"
    legacy.write_text(json.dumps({"session_id": "s", "memories": {}}))
    for args in (
        ("export", str(tmp_path / "x.jsonl"), "--tenant", "bad\u0001tenant"),
        ("import", str(other_dim)),
        ("import", str(tmp_path / "missing.jsonl")),
        ("gc", "--batch-size", "0"),
        ("gc", "--idle-days", "-1"),
        ("import-legacy", str(legacy), "--tenant", "bad\u0001tenant"),
    ):
        result = await cli(*args)
        assert result.exit_code != 0, args
        assert result.stdout == "", args
        first = result.stderr.splitlines()[0]
        assert first.startswith(("Error:", "Usage:")), (args, result.stderr)
        assert not any(STAMP.match(line) for line in result.stderr.splitlines()), args


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
async def test_a_terminal_gets_the_rich_display(
    service: MemoryService, memsvc_database_url: str, tmp_path: Path
) -> None:
    await _populate(service)
    leader, follower = pty.openpty()
    env = {**os.environ, "MEMSVC_DATABASE_URL": memsvc_database_url,
           "MEMSVC_AUTO_MIGRATE": "false", "TERM": "xterm", "COLUMNS": "120"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from memsvc.cli import main; main()",
        "export", str(tmp_path / "dump.jsonl"),
        stdout=asyncio.subprocess.PIPE, stderr=follower, env=env,
    )
    os.close(follower)
    stdout, _ = await process.communicate()
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal is closed once the process is gone
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    terminal = b"".join(chunks).decode(errors="replace")
    assert process.returncode == 0, terminal
    assert "exporting" in terminal and "100%" in terminal
    assert not STAMP.search(terminal)  # the live display, not log lines
    assert b"exported 20 memories" in stdout
