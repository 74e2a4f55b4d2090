"""A second PostgreSQL cluster, and moving a database into it with pg_dump / pg_restore."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from memsvc.db.embedded import EmbeddedPostgres
from memsvc.testing.postgres import with_database
from memsvc.testing.replica import client_program

# Prepared transactions are off on the suite's server (max_prepared_transactions
# = 0); this cluster allows a few, for the tests of what one holding the feed
# back does.
PREPARED_TRANSACTIONS = 8


@dataclass
class Cluster:
    """A running embedded PostgreSQL of its own (its own system identifier and xids)."""

    dsn: str

    async def create_database(self) -> tuple[str, str]:
        """A new empty database: (name, DSN)."""
        name = f"memsvc_r_{uuid.uuid4().hex[:10]}"
        conn = await asyncpg.connect(self.dsn)
        try:
            await conn.execute(f"CREATE DATABASE {name}")
        finally:
            await conn.close()
        return name, with_database(self.dsn, name)

    async def drop_database(self, name: str) -> None:
        conn = await asyncpg.connect(self.dsn)
        try:
            await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        finally:
            await conn.close()


def start_cluster() -> Iterator[Cluster]:
    """Start a cluster in a temporary directory, allowing prepared transactions."""
    directory = Path(tempfile.mkdtemp(prefix="memsvc-other-pg-"))
    server = EmbeddedPostgres(directory)
    try:
        dsn = server.start()
        asyncio.run(_allow_prepared_transactions(dsn))
        server.stop()  # the setting takes effect at the next start
        server = EmbeddedPostgres(directory)
        yield Cluster(server.start())
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


async def _allow_prepared_transactions(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f"ALTER SYSTEM SET max_prepared_transactions = {PREPARED_TRANSACTIONS}")
    finally:
        await conn.close()


async def dump_and_restore(source_dsn: str, target: Cluster) -> tuple[str, str]:
    """Copy a database into a new one on ``target`` as an operator would; (name, DSN)."""
    name, dsn = await target.create_database()
    with tempfile.TemporaryDirectory(prefix="memsvc-dump-") as directory:
        dump = str(Path(directory) / "db.dump")
        await asyncio.to_thread(_run, client_program("pg_dump"), "-Fc", "-f", dump, source_dsn)
        await asyncio.to_thread(_run, client_program("pg_restore"), "-d", dsn, dump)
    return name, dsn


def _run(*command: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise AssertionError(f"{command[0]} failed: {done.stderr}")


async def burn_transaction_ids(dsn: str, count: int) -> None:
    """Make the server hand out ``count`` transaction ids (one committed transaction each)."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            f"DO $$ BEGIN FOR i IN 1..{count} LOOP PERFORM pg_current_xact_id(); COMMIT; "
            "END LOOP; END $$"
        )
    finally:
        await conn.close()


async def next_transaction_id(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval("SELECT pg_snapshot_xmax(pg_current_snapshot())::text"))
    finally:
        await conn.close()
