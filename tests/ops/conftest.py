"""Fixtures of the operations tests: the ``memsvc`` command run in-process on real servers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import asyncpg
import pytest
from click.testing import CliRunner, Result

from memsvc import MemoryService, Settings
from memsvc.cli import main
from memsvc.embedding import HashingEmbedder
from memsvc.testing.postgres import MigratedTemplate, settings_for_tests

FIXTURES = Path(__file__).parent / "fixtures"

Cli = Callable[..., Awaitable[Result]]


def run_cli(dsn: str, *args: str) -> Result:
    """``memsvc ARGS`` against ``dsn``, in-process (exit code and output captured)."""
    env = {"MEMSVC_DATABASE_URL": dsn, "MEMSVC_AUTO_MIGRATE": "false"}
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


@pytest.fixture
def cli(memsvc_database_url: str) -> Cli:
    """Run the command line on this test's database, off the event loop."""

    async def invoke(*args: str, dsn: str | None = None) -> Result:
        # The command runs its own event loop (asyncio.run): give it a thread.
        return await asyncio.to_thread(run_cli, dsn or memsvc_database_url, *args)

    return invoke


@pytest.fixture
async def db(memsvc_database_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A plain connection to this test's database, for checks in SQL."""
    conn = await asyncpg.connect(memsvc_database_url)
    yield conn
    await conn.close()


@pytest.fixture
async def other_database(memsvc_template: MigratedTemplate) -> AsyncIterator[str]:
    """A second fresh, migrated database (imports into a new store)."""
    if memsvc_template.shared_dsn is not None:
        pytest.skip("needs CREATE DATABASE to get a second database")
    async with memsvc_template.fresh_database() as dsn:
        yield dsn


async def open_service(dsn: str, **overrides: object) -> MemoryService:
    """Another service on a database (its own pool: a second worker)."""
    settings: Settings = settings_for_tests(dsn, **overrides)
    return await MemoryService.open(settings, embedder=HashingEmbedder(settings.embedding_dim))
