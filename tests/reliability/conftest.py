"""Fixtures of the reliability suite: servers a test may crash, admin connections,
services on fresh databases with chosen settings.

Every fixture here starts real servers (embedded PostgreSQL, redis-server,
pgbouncer) or uses the session's; nothing is mocked.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest

from memsvc import HashingEmbedder, MemoryService, Settings
from memsvc.testing.postgres import settings_for_tests
from tests.reliability.servers import PrivatePostgres

T = TypeVar("T")

ServiceFactory = Callable[..., Any]


async def bounded(awaitable: Awaitable[T], seconds: float) -> T:
    """Await with a hard bound: a hang fails the test instead of stalling CI."""
    return await asyncio.wait_for(awaitable, seconds)


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    """A private embedded PostgreSQL (not the session's), started; the test may SIGKILL it."""
    directory = Path(tempfile.mkdtemp(prefix="memsvc-rel-pg-"))
    server = PrivatePostgres(directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
async def admin(memsvc_database_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A superuser connection to this test's database, outside memsvc's pool."""
    conn = await asyncpg.connect(memsvc_database_url, server_settings={"application_name": "admin"})
    try:
        yield conn
    finally:
        conn.terminate()


@pytest.fixture
async def open_service(
    memsvc_database_url: str,
) -> AsyncIterator[Callable[..., Any]]:
    """Open services on this test's database with chosen settings; closed at teardown.

    ``async with open_service(lock_timeout_ms=200) as svc: ...`` or
    ``svc = await open_service.open(...)``.
    """
    opened: list[MemoryService] = []

    @asynccontextmanager
    async def factory(
        dsn: str | None = None, embedder: bool = True, **overrides: Any
    ) -> AsyncIterator[MemoryService]:
        settings: Settings = settings_for_tests(dsn or memsvc_database_url, **overrides)
        service = await MemoryService.open(
            settings, embedder=HashingEmbedder(settings.embedding_dim) if embedder else None
        )
        opened.append(service)
        try:
            yield service
        finally:
            await service.close()

    yield factory
    for service in opened:
        await service.close()


def unique_name(prefix: str) -> str:
    """A database or scope name no other test uses."""
    return f"{prefix}_{uuid.uuid4().hex[:10]}"
