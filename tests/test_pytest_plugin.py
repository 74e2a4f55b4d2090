"""The ``memsvc.testing`` plugin works in a fresh project in pytest-asyncio's strict
mode (tests marked ``@pytest.mark.asyncio``) and in auto mode.

Each case writes a throwaway project and runs pytest on it in a child process,
against this session's PostgreSQL server (through MEMSVC_TEST_DATABASE_URL).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memsvc.testing.postgres import TEST_DATABASE_URL_ENV, TestPostgres

pytestmark = pytest.mark.timeout(240)

STRICT_TESTS = '''
import pytest
from memsvc import Scope


@pytest.mark.asyncio
async def test_the_service_stores_and_finds(memsvc_service):
    scope = Scope("t", "p")
    await memsvc_service.memories.add(scope, "the kettle is on")
    hits = await memsvc_service.memories.search(scope, "kettle", k=1)
    assert [hit.memory.content for hit in hits] == ["the kettle is on"]


@pytest.mark.asyncio
async def test_each_test_gets_a_clean_database(memsvc_service):
    assert await memsvc_service.memories.search(Scope("t", "p"), "kettle", k=1) == []


def test_the_sync_fixtures_load(memsvc_settings, memsvc_database_url):
    assert memsvc_settings.database_url == memsvc_database_url
'''

# In auto mode the same tests need no marker.
AUTO_TESTS = STRICT_TESTS.replace("@pytest.mark.asyncio\n", "")


def run_project(tmp_path: Path, server: TestPostgres, ini: str, tests: str) -> str:
    (tmp_path / "pytest.ini").write_text(ini)
    (tmp_path / "test_app.py").write_text(tests)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMSVC_", "PYTEST_"))}
    env[TEST_DATABASE_URL_ENV] = server.dsn
    result = subprocess.run(
        # Its own basetemp: a child pytest would otherwise reset the shared
        # pytest-of-<user> directory's mode under the running suite.
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "--basetemp", str(tmp_path / "basetemp")],
        cwd=tmp_path, capture_output=True, text=True, env=env, timeout=200, check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    return output


def test_the_fixtures_work_in_strict_mode(tmp_path: Path, memsvc_postgres: TestPostgres) -> None:
    # pytest-asyncio's default mode; only the mode is set (to be explicit).
    output = run_project(tmp_path, memsvc_postgres, "[pytest]\nasyncio_mode = strict\n",
                         STRICT_TESTS)
    assert "3 passed" in output


def test_the_fixtures_work_with_no_asyncio_settings(
    tmp_path: Path, memsvc_postgres: TestPostgres
) -> None:
    output = run_project(tmp_path, memsvc_postgres, "[pytest]\n", STRICT_TESTS)
    assert "3 passed" in output


def test_the_fixtures_work_in_auto_mode(tmp_path: Path, memsvc_postgres: TestPostgres) -> None:
    ini = "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    output = run_project(tmp_path, memsvc_postgres, ini, AUTO_TESTS)
    assert "3 passed" in output


def test_the_fixtures_work_with_a_session_loop(
    tmp_path: Path, memsvc_postgres: TestPostgres
) -> None:
    # Projects that share one loop for the whole session (as memsvc's own suite does).
    ini = (
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = session\n"
        "asyncio_default_test_loop_scope = session\n"
    )
    output = run_project(tmp_path, memsvc_postgres, ini, AUTO_TESTS)
    assert "3 passed" in output
