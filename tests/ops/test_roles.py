"""Least privilege: migrate as the migration role, run as the runtime role (no DDL, no TRUNCATE)."""

from __future__ import annotations

import asyncio
import uuid
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from memsvc import HashingEmbedder, MemoryService, Scope
from memsvc.db import migrate
from memsvc.testing.postgres import TestPostgres, settings_for_tests

from .conftest import run_cli


def as_user(dsn: str, user: str) -> str:
    """The same DSN logging in as ``user`` (no password: trust or peer auth)."""
    parts = urlsplit(dsn)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{user}@{host}"))


@pytest.fixture
async def roles(memsvc_postgres: TestPostgres) -> tuple[str, str, str]:
    """An empty database and two fresh role names; all dropped afterwards."""
    suffix = uuid.uuid4().hex[:8]
    name = f"memsvc_roles_{suffix}"
    migrator, runtime = f"mig_{suffix}", f"app_{suffix}"
    dsn = await memsvc_postgres.create_database(name)
    yield dsn, migrator, runtime  # type: ignore[misc]
    await memsvc_postgres.drop_database(name)
    admin = await asyncpg.connect(memsvc_postgres.dsn)
    try:
        for role in (runtime, migrator):
            await admin.execute(f"DROP ROLE IF EXISTS {role}")
    finally:
        await admin.close()


async def test_runtime_role_reads_and_writes_rows_but_cannot_change_the_schema(
    roles: tuple[str, str, str], memsvc_postgres: TestPostgres
) -> None:
    dsn, migrator, runtime = roles
    if "host=/" not in dsn and "@/" not in dsn:
        pytest.skip("needs a server that trusts local logins (the embedded one does)")
    printed = await asyncio.to_thread(
        run_cli, dsn, "roles", "--print-sql", "--migration-role", migrator,
        "--runtime-role", runtime,
    )
    assert printed.exit_code == 0, printed.output
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(printed.output)  # as a superuser, like a DBA would
        await admin.execute(printed.output)  # and re-running it is harmless
    finally:
        await admin.close()

    migrator_dsn = as_user(dsn, migrator)
    await asyncio.to_thread(migrate.upgrade, settings_for_tests(migrator_dsn), migrator_dsn)

    runtime_dsn = as_user(dsn, runtime)
    settings = settings_for_tests(runtime_dsn)
    async with MemoryService.open(settings, embedder=HashingEmbedder()) as svc:
        scope = Scope("acme", "p", "a", "s")
        memory = await svc.memories.add(scope, "least privilege works")
        await svc.memories.put(scope, "prefs/units", "metric")
        hits = await svc.memories.search(scope, "least privilege", k=1)
        assert hits[0].memory.id == memory.id
        await svc.checkpoints.create(scope, {"ok": True})
        assert await svc.memories.delete(memory.id)
        async with svc.pool.acquire() as conn:
            assert await conn.fetchval("SELECT count(*) FROM memsvc.scope_stats") == 1
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute("CREATE TABLE memsvc.x (id int)")
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute("TRUNCATE memsvc.memories")
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute("DROP TABLE memsvc.memory_events")
    owner = await asyncpg.connect(dsn)
    try:
        assert await owner.fetchval(
            "SELECT tableowner FROM pg_tables WHERE schemaname = 'memsvc' "
            "AND tablename = 'memories'"
        ) == migrator
    finally:
        await owner.close()


def test_roles_refuses_bad_names_and_needs_print_sql() -> None:
    result = run_cli("postgresql://unused/x", "roles", "--print-sql", "--runtime-role", "App;--")
    assert result.exit_code != 0 and "runtime_role" in result.output
    result = run_cli("postgresql://unused/x", "roles")
    assert result.exit_code != 0 and "--print-sql" in result.output
