"""Issue 31, item 1: ``memsvc citus --print-sql``, run as printed, distributes everything.

The script's header says to run it with ``psql -v ON_ERROR_STOP=1 -f``; it
must then finish without an error, leave every tenant table distributed and
the search settings on every node, and, when it does fail, leave nothing
half done.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from click.testing import CliRunner

from memsvc.cli import main as cli
from memsvc.ops.citus import apply_citus, check_distribution, placements
from memsvc.ops.doctor_report import DoctorReport
from memsvc.service import TENANT_TABLES
from memsvc.testing.citus import CitusCluster, CitusSchema
from tests.citus.helpers import own_schema, run_psql_file


def printed_script(schema: CitusSchema, tmp_path: Path) -> Path:
    result = CliRunner().invoke(cli, ["citus", "--print-sql", "--schema", schema.schema])
    assert result.exit_code == 0, result.output
    path = tmp_path / "citus.sql"
    path.write_text(result.output)
    return path


async def distributed_tables(dsn: str, schema: str) -> set[str]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT table_name::text AS name FROM citus_tables "
            "WHERE citus_table_type = 'distributed' AND table_name::text LIKE $1",
            f"{schema}.%",
        )
    finally:
        await conn.close()
    return {row["name"].split(".", 1)[1] for row in rows}


async def test_printed_script_distributes_every_tenant_table_without_error(
    citus_cluster: CitusCluster, tmp_path: Path
) -> None:
    async with own_schema(citus_cluster, distributed=False) as schema:
        done = run_psql_file(citus_cluster.dsn, printed_script(schema, tmp_path))
        output = done.stdout + done.stderr
        assert done.returncode == 0, output
        # run_command_on_workers reports a worker's error as a result row,
        # and psql still exits 0: look at what it printed too.
        assert "ERROR" not in output, output
        assert await distributed_tables(citus_cluster.dsn, schema.schema) >= set(TENANT_TABLES)


WORKER_SETTINGS = """
SELECT success, result FROM run_command_on_workers($$
    SELECT coalesce(array_to_string(setconfig, ','), '') FROM pg_db_role_setting
    WHERE setrole = 0
      AND setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())$$)"""


@contextlib.asynccontextmanager
async def database_settings_cleared(dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """No database-wide settings meanwhile (the session's schema set some); put back after."""
    conn = await asyncpg.connect(dsn)
    try:
        database = await conn.fetchval("SELECT current_database()")
        saved = await conn.fetchval(
            "SELECT setconfig FROM pg_db_role_setting WHERE setrole = 0 AND setdatabase = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        # Citus propagates ALTER DATABASE ... SET / RESET to the workers.
        await conn.execute(f'ALTER DATABASE "{database}" RESET ALL')
        try:
            yield conn
        finally:
            await conn.execute(f'ALTER DATABASE "{database}" RESET ALL')
            for setting in saved or []:
                name, value = setting.split("=", 1)
                await conn.execute(
                    await conn.fetchval(
                        "SELECT format('ALTER DATABASE %I SET %s = %L', $1::text, $2::text, "
                        "$3::text)",
                        database,
                        name,
                        value,
                    )
                )
    finally:
        await conn.close()


async def test_printed_script_leaves_the_search_settings_on_every_worker(
    citus_cluster: CitusCluster, tmp_path: Path
) -> None:
    async with (
        own_schema(citus_cluster, distributed=False) as schema,
        database_settings_cleared(citus_cluster.dsn) as conn,
    ):
        assert all(r["result"] == "" for r in await conn.fetch(WORKER_SETTINGS))
        run_psql_file(citus_cluster.dsn, printed_script(schema, tmp_path))
        rows = await conn.fetch(WORKER_SETTINGS)
    assert len(rows) == 2
    for row in rows:
        assert row["success"], row["result"]
        assert "hnsw.iterative_scan=relaxed_order" in row["result"]
        assert "hnsw.ef_search=" in row["result"]


async def test_a_failing_script_leaves_no_table_distributed(
    citus_cluster: CitusCluster, tmp_path: Path
) -> None:
    async with own_schema(citus_cluster, distributed=False) as schema:
        # A unique constraint without tenant_id on the table distributed last:
        # Citus refuses it, so the script must fail there, at its very end.
        last = placements(schema.settings)[-1].table
        conn = await asyncpg.connect(citus_cluster.dsn)
        try:
            column = await conn.fetchval(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = $1 "
                "AND table_name = $2 AND column_name <> 'tenant_id' ORDER BY ordinal_position "
                "LIMIT 1",
                schema.schema,
                last,
            )
            await conn.execute(
                f"ALTER TABLE {schema.schema}.{last} ADD CONSTRAINT blocks_citus UNIQUE ({column})"
            )
        finally:
            await conn.close()
        done = run_psql_file(citus_cluster.dsn, printed_script(schema, tmp_path))
        assert done.returncode != 0
        assert await distributed_tables(citus_cluster.dsn, schema.schema) == set()


async def test_citus_apply_distributes_a_fresh_schema_in_one_step_and_again_changes_nothing(
    citus_cluster: CitusCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with own_schema(citus_cluster, distributed=False) as schema:
        monkeypatch.setenv("MEMSVC_DATABASE_URL", citus_cluster.dsn)
        apply = ["citus", "--schema", schema.schema, "apply"]
        # In a thread: the command runs an event loop of its own.
        first = await asyncio.to_thread(CliRunner().invoke, cli, apply)
        assert first.exit_code == 0, first.output
        assert await distributed_tables(citus_cluster.dsn, schema.schema) >= set(TENANT_TABLES)
        again = await asyncio.to_thread(CliRunner().invoke, cli, apply)
        assert again.exit_code == 0, again.output
        assert "already distributed" in again.output


async def test_doctor_reports_the_distribution_and_a_table_left_local(
    citus_cluster: CitusCluster,
) -> None:
    async with own_schema(citus_cluster, distributed=False) as schema:
        conn = await asyncpg.connect(citus_cluster.dsn)
        try:
            report = DoctorReport()
            await check_distribution(conn, schema.settings, report)
            (check,) = report.checks
            assert check.status == "problem" and "memories" in check.detail
            await apply_citus(conn, schema.settings)
            report = DoctorReport()
            await check_distribution(conn, schema.settings, report)
            (check,) = report.checks
        finally:
            await conn.close()
        assert check.status == "ok", check.detail
        assert "tables distributed by tenant_id" in check.detail
        assert "1 co-location group" in check.detail and "2 active workers" in check.detail
