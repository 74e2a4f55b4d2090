"""A compiled LangGraph graph on MemsvcSaver and MemsvcStore, across processes.

Each step runs in a fresh Python process (``tests/integrations/langgraph_app.py``)
against the test's database: the first is interrupted, a second resumes it
from its checkpoint, and a later thread reads the fact the first one stored.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph", reason="the langgraph extra is not installed")

ROOT = Path(__file__).resolve().parents[2]


def run_app(database_url: str, *args: str) -> dict[str, Any]:
    env = {**os.environ, "MEMSVC_DATABASE_URL": database_url, "MEMSVC_AUTO_MIGRATE": "false"}
    env.pop("MEMSVC_REDIS_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "tests.integrations.langgraph_app", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_graph_is_interrupted_resumed_in_a_new_process_and_remembers(
    memsvc_database_url: str,
) -> None:
    first = run_app(memsvc_database_url, "start", "t-1", "ada", "the user prefers metric units")
    assert first["interrupted"] is True
    assert first["next"] == ["approve"]
    assert first["messages"][-1] == "stored: the user prefers metric units"

    resumed = run_app(memsvc_database_url, "resume", "t-1", "ada", "yes")
    assert resumed["interrupted"] is False
    assert resumed["messages"][-1] == "decision: yes"
    # The whole history of the thread came back from PostgreSQL, not from memory.
    assert resumed["messages"][:3] == [
        "the user prefers metric units",
        "known: ",
        "stored: the user prefers metric units",
    ]

    later = run_app(memsvc_database_url, "start", "t-2", "ada", "what units?")
    assert later["messages"][1] == "known: the user prefers metric units"
    other_user = run_app(memsvc_database_url, "start", "t-3", "bob", "hello")
    assert other_user["messages"][1] == "known: "
