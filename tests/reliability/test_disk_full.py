"""Disk full: memsvc's tables on a small tmpfs tablespace are filled until
PostgreSQL refuses to extend them. The writer gets a clear StorageError
(SQLSTATE 53100), what was stored before stays intact, and writes resume once
there is space again."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest

from memsvc import MemoryService, Scope, StorageError
from memsvc.core.ids import new_id
from memsvc.testing.postgres import MigratedTemplate, TestPostgres, settings_for_tests
from tests.reliability.checks import assert_every_row_has_its_created_event
from tests.reliability.conftest import bounded

SERVER_USER = "pgserver"  # the OS user the embedded server runs as (it runs as root otherwise)
CHUNK_BYTES = 96 * 1024


def _mount(
    directory: Path, size: str, *, remount: bool = False
) -> subprocess.CompletedProcess[str]:
    options = f"remount,size={size}" if remount else f"size={size}"
    return subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(directory)],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )


@pytest.fixture
async def full_disk_database(
    memsvc_postgres: TestPostgres, memsvc_template: MigratedTemplate
) -> AsyncIterator[tuple[str, Path]]:
    """A fresh database whose memsvc tables live on an 8 MB tmpfs tablespace."""
    if "host=/" not in urlsplit(memsvc_postgres.dsn).query:
        pytest.skip("needs the embedded server (a tablespace on this machine's filesystem)")
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    directory = Path(tempfile.mkdtemp(prefix="memsvc-tmpfs-"))
    mounted = _mount(directory, "8m")
    if mounted.returncode != 0:
        directory.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    entry = pwd.getpwnam(SERVER_USER)
    os.chown(directory, entry.pw_uid, entry.pw_gid)
    name = f"memsvc_full_{uuid.uuid4().hex[:10]}"
    tablespace = f"tiny_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(memsvc_postgres.dsn)
    try:
        await admin.execute(f"CREATE TABLESPACE {tablespace} LOCATION '{directory}'")
        dsn = await memsvc_postgres.create_database(name, template=memsvc_template.name)
        conn = await asyncpg.connect(dsn)
        try:
            statements = await conn.fetch(
                "SELECT format('ALTER TABLE %s SET TABLESPACE %I', t::regclass, $1::text)"
                " FROM unnest(ARRAY['memsvc.memories', 'memsvc.memory_events']) AS t"
                " UNION ALL"
                " SELECT format('ALTER INDEX %s SET TABLESPACE %I', indexrelid::regclass, $1::text)"
                " FROM pg_index WHERE indrelid IN"
                " ('memsvc.memories'::regclass, 'memsvc.memory_events'::regclass)",
                tablespace,
            )
            for (statement,) in statements:
                await conn.execute(statement)
        finally:
            await conn.close()
        yield dsn, directory
    finally:
        with contextlib.suppress(Exception):
            await memsvc_postgres.drop_database(name)
        with contextlib.suppress(Exception):
            await admin.execute(f"DROP TABLESPACE IF EXISTS {tablespace}")
        await admin.close()
        subprocess.run(["umount", str(directory)], check=False, timeout=30)
        with contextlib.suppress(OSError):
            directory.rmdir()


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_full_disk_gives_a_clear_storage_error_keeps_data_and_recovers(
    full_disk_database: tuple[str, Path],
) -> None:
    dsn, directory = full_disk_database
    scope = Scope(tenant="disk", session="s-1")
    settings = settings_for_tests(dsn, command_timeout_s=30.0)
    acknowledged: dict[uuid.UUID, str] = {}
    async with MemoryService.open(settings) as service:
        error: StorageError | None = None
        for i in range(400):  # 8 MB / 96 KB of incompressible text: full well before this
            content = f"{i} " + base64.b64encode(os.urandom(CHUNK_BYTES)).decode()
            memory_id = new_id()
            try:
                await bounded(service.memories.add(scope, content, id=memory_id), 30)
            except StorageError as exc:
                error = exc
                break
            acknowledged[memory_id] = content
        assert error is not None, "the tablespace never filled up"
        assert error.sqlstate == "53100", error
        assert acknowledged, "nothing fitted before the disk filled"

        stored = {m.id: m.content for m in await service.memories.get_many(list(acknowledged))}
        assert stored == acknowledged
        conn = await asyncpg.connect(dsn)
        try:
            await assert_every_row_has_its_created_event(conn, settings.db_schema)
        finally:
            await conn.close()

        remounted = await asyncio.to_thread(_mount, directory, "64m", remount=True)
        assert remounted.returncode == 0, remounted.stderr
        after = await bounded(service.memories.add(scope, "written once there was room"), 30)
        assert (await service.memories.get(after.id)).content == "written once there was room"
        assert await service.memories.count(scope) == len(acknowledged) + 1
