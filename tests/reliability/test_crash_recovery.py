"""PostgreSQL killed with SIGKILL under concurrent writes, then restarted.

The server is private to each test (never the session's): it is killed in the
middle of a stream of adds, started again (recovering from its WAL), and the
same MemoryService object must carry on by itself.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
from pathlib import Path

import asyncpg
import psutil
import pytest

from memsvc import ConcurrencyError, MemoryService, Scope, StorageError
from memsvc.core.ids import new_id
from memsvc.db.embedded import EmbeddedPostgres, running_postmaster_pid
from memsvc.embedding import HashingEmbedder
from memsvc.testing.postgres import settings_for_tests
from tests.reliability.checks import (
    WriteLedger,
    assert_every_row_has_its_created_event,
    assert_ledger_holds,
)
from tests.reliability.conftest import bounded
from tests.reliability.servers import PrivatePostgres, create_migrated_database

WRITERS = 8
WRITES_BEFORE_KILL = 300
CALL_BOUND_S = 20.0
RECOVERY_BOUND_S = 30.0


async def _recovered(service: MemoryService, scope: Scope) -> int:
    """Call the service until it answers; returns how many calls failed first."""
    failures = 0
    while True:
        try:
            await service.memories.count(scope)
            return failures
        except StorageError:
            failures += 1
            await asyncio.sleep(0.1)


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_acknowledged_writes_survive_sigkill(private_postgres: PrivatePostgres) -> None:
    dsn = await create_migrated_database(private_postgres.dsn, "crash_writes")
    settings = settings_for_tests(
        dsn, pool_max_size=WRITERS, connect_timeout_s=2.0, command_timeout_s=10.0
    )
    scope = Scope(tenant="crash", session="s-1")
    ledger = WriteLedger()
    enough = asyncio.Event()

    async with MemoryService.open(settings, embedder=HashingEmbedder()) as service:

        async def writer(w: int) -> None:
            # Writes until its first failure (the crash), which it records as unknown.
            i = 0
            while True:
                memory_id, content = new_id(), f"writer {w} write {i}"
                try:
                    await bounded(service.memories.add(scope, content, id=memory_id), CALL_BOUND_S)
                except (StorageError, ConcurrencyError) as exc:
                    ledger.failed(memory_id, content, exc)
                    return
                ledger.acknowledged[memory_id] = content
                if len(ledger.acknowledged) >= WRITES_BEFORE_KILL:
                    enough.set()
                i += 1

        tasks = [asyncio.create_task(writer(w)) for w in range(WRITERS)]
        await bounded(enough.wait(), 120)
        await asyncio.to_thread(private_postgres.kill)
        await bounded(asyncio.gather(*tasks), 60)
        assert len(ledger.unknown) == WRITERS, "every writer should have seen the crash"

        await asyncio.to_thread(private_postgres.start)
        failed_calls = await bounded(_recovered(service, scope), RECOVERY_BOUND_S)

        await assert_ledger_holds(service, scope, ledger)
        conn = await asyncpg.connect(dsn)
        try:
            await assert_every_row_has_its_created_event(conn, settings.db_schema)
        finally:
            await conn.close()
    # How many calls failed before the pool found the new server (bounded above).
    assert failed_calls < RECOVERY_BOUND_S / 0.1


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_embedded_postgres_restarts_in_the_same_process_after_a_crash() -> None:
    """A process whose embedded server was killed can start it again with a new handle.

    (The wheel caches one server object per data directory; a fresh
    ``EmbeddedPostgres(dir).start()`` must not hand back the dead one.)
    """
    directory = Path(tempfile.mkdtemp(prefix="memsvc-rel-pg-"))
    first = EmbeddedPostgres(directory)
    second = EmbeddedPostgres(directory)
    try:
        await asyncio.to_thread(first.start)
        pid = running_postmaster_pid(directory)
        assert pid is not None
        postmaster = psutil.Process(pid)
        children = postmaster.children(recursive=True)
        os.kill(pid, signal.SIGKILL)
        await asyncio.to_thread(psutil.wait_procs, [postmaster, *children], 30)

        dsn = await asyncio.to_thread(second.start)
        conn = await asyncpg.connect(dsn, timeout=10)
        try:
            assert await conn.fetchval("SELECT 1") == 1
        finally:
            await conn.close()
    finally:
        for handle in (second, first):
            await asyncio.to_thread(handle.close)
        pid = running_postmaster_pid(directory)
        if pid is not None:
            process = psutil.Process(pid)
            os.kill(pid, signal.SIGINT)
            await asyncio.to_thread(psutil.wait_procs, [process], 30)
        shutil.rmtree(directory, ignore_errors=True)
