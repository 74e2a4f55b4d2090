"""The reference pages cannot drift from the code they describe.

Every table, view and command appears on its reference page, and every
test the guarantees page names exists (settings: tests/test_settings.py).
The Python API reference is generated from the docstrings by mkdocstrings;
CI builds it strictly.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from memsvc.cli import main
from memsvc.core.settings import Settings
from memsvc.db.tables import build_metadata

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def test_every_table_and_view_is_on_the_schema_page() -> None:
    text = page("reference/schema.md")
    names = [table.name for table in build_metadata(Settings()).sorted_tables]
    names += ["scope_stats", "recent_activity"]
    assert [name for name in names if f"| `{name}` |" not in text] == []


def test_every_command_is_on_the_command_line_page() -> None:
    text = page("reference/cli.md")
    commands = [f"memsvc {name}" for name in main.commands]
    db = main.commands["db"]
    assert isinstance(db, click.Group)
    commands += [f"memsvc db {name}" for name in db.commands]
    assert [command for command in commands if command not in text] == []


def test_every_test_the_guarantees_page_names_exists() -> None:
    named = set(re.findall(r"\b(test_[a-z0-9_]+)\b", page("explanation/guarantees.md")))
    assert len(named) > 20
    sources = "\n".join(
        path.read_text(encoding="utf-8") for path in (ROOT / "tests").rglob("test_*.py")
    )
    defined = set(re.findall(r"def (test_[a-z0-9_]+)", sources))
    files = {path.stem for path in (ROOT / "tests").rglob("test_*.py")}
    assert sorted(name for name in named if name not in defined | files) == []
