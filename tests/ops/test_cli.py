"""The command line: every command documents itself; failures are messages, not tracebacks."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from memsvc.cli import main

from .conftest import Cli


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for name, command in group.commands.items():
        found.append((*prefix, name))
        if isinstance(command, click.Group):
            found += _commands(command, (*prefix, name))
    return found


@pytest.mark.parametrize("path", _commands(main), ids=" ".join)
def test_every_command_has_help(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0
    assert "Usage:" in result.output and len(result.output.splitlines()) > 3


def test_ops_commands_exist() -> None:
    names = set(main.commands)
    assert names >= {"stats", "doctor", "gc", "export", "import", "import-legacy", "roles",
                     "migrate", "demo", "db"}


async def test_errors_are_messages_with_a_nonzero_exit_code(cli: Cli, tmp_path: Path) -> None:
    bad = await cli("export", str(tmp_path / "x.jsonl"), "--tenant", "bad\u0001tenant")
    assert bad.exit_code == 1
    assert bad.output.startswith("Error: ValidationError: scope.tenant")
    missing = await cli("import", str(tmp_path / "nope.jsonl"))
    assert missing.exit_code == 2 and "does not exist" in missing.output
    unreachable = await cli("stats", dsn="postgresql://nobody@127.0.0.1:1/none")
    assert unreachable.exit_code == 1
    assert "Error: StorageError" in unreachable.output and "Traceback" not in unreachable.output


async def test_the_demo_shows_what_each_search_arm_finds(cli: Cli) -> None:
    result = await cli("demo")
    assert result.exit_code == 0, result.output
    out = result.output

    def hits(after: str) -> list[str]:
        section = out.split(after, 1)[1].splitlines()[1:]
        return [line for line in section[:3] if line.startswith("    ")]

    assert len(hits("  vector arm (mode='vector')")) == 3
    (text_hit,) = [h for h in hits("  text arm (mode='text' on 'BR-1142')") if "BR-1142" in h]
    assert "ticket BR-1142" in text_hit
    fused = hits("  hybrid (the default for text when there is an embedder)")
    assert len(fused) == 3
    # The fused list names the arms: the ticket first, found by the text arm,
    # and the others found by the vector arm alone.
    assert "ticket BR-1142" in fused[0] and "text arm #1" in fused[0], fused
    assert all(line.endswith(")") and "text arm" not in line for line in fused[1:]), fused
    assert all("vector arm #" in line for line in fused[1:]), fused
