"""Helpers of the Citus tests: psql, a schema of a test's own, the nodes' transaction ids."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from memsvc.testing.citus import (
    CitusCluster,
    CitusSchema,
    pginstall_directory,
    unique_schema_name,
)


def psql_binary() -> str:
    """A psql that runs here: the PostgreSQL tree's own, else one on PATH (else skip)."""
    candidates = [str(pginstall_directory() / "bin" / "psql"), shutil.which("psql")]
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            done = subprocess.run([candidate, "--version"], capture_output=True, check=False)
            if done.returncode == 0:
                return candidate
    pytest.skip("no runnable psql (the script is meant to be run with psql)")


def run_psql_file(dsn: str, path: Path) -> subprocess.CompletedProcess[str]:
    """``psql -X -v ON_ERROR_STOP=1 -f path``, as the script's header says to run it."""
    return subprocess.run(
        [psql_binary(), "-X", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-f", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )


@contextlib.asynccontextmanager
async def own_schema(
    cluster: CitusCluster, *, distributed: bool = True, **settings: Any
) -> AsyncIterator[CitusSchema]:
    """A schema of this test's own (other settings fixed at migration), dropped after."""
    settings.setdefault("db_schema", unique_schema_name())
    schema = CitusSchema(cluster, **settings)
    try:
        await schema.build(distributed=distributed)
        yield schema
    finally:
        await schema.drop()


def worker_dsns(cluster: CitusCluster) -> list[str]:
    """DSNs of the workers themselves (same user and database as the coordinator)."""
    return [cluster.dsn.replace(f":{cluster.ports[0]}/", f":{port}/") for port in cluster.ports[1:]]


async def current_xid(dsn: str) -> int:
    """The next transaction id a node hands out (about)."""
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval("SELECT pg_current_xact_id()::text"))
    finally:
        await conn.close()


async def advance_xids(dsn: str, count: int) -> None:
    """Use up ``count`` transaction ids on one node (one committed transaction each)."""
    if count <= 0:
        return
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            f"DO $$ BEGIN FOR i IN 1..{int(count)} LOOP "
            "PERFORM pg_current_xact_id(); COMMIT; END LOOP; END $$"
        )
    finally:
        await conn.close()


async def skew_xids(cluster: CitusCluster, *, ahead: str, by: int) -> None:
    """Put one side's transaction ids ``by`` past the other's: ``coordinator`` or ``workers``.

    Nodes of a cluster hand out transaction ids independently, so in a real
    cluster they drift apart; this makes the drift certain and large.
    """
    coordinator = await current_xid(cluster.dsn)
    workers = {dsn: await current_xid(dsn) for dsn in worker_dsns(cluster)}
    if ahead == "coordinator":
        await advance_xids(cluster.dsn, max(workers.values()) + by - coordinator)
    else:
        for dsn, xid in workers.items():
            await advance_xids(dsn, coordinator + by - xid)
