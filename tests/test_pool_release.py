"""Returning pooled connections: clean ones skip the reset, and nothing leaks.

memsvc takes and returns connections through asyncpg's public pool API and
skips the reset round trip (through the pool's ``reset=`` hook) only for a
connection it marked clean. These tests hold it to what a pool promises: no
connection is ever handed to two callers at once, none comes back inside a
transaction or with session state, and a call cancelled at any point still
returns its connection.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import asyncpg

from memsvc import MemoryService, Scope


async def test_a_connection_marked_clean_is_returned_without_a_reset(
    service: MemoryService,
) -> None:
    # The control: a connection memsvc did not mark is reset in full.
    pool = service.pool
    conn = await pool.acquire()
    pid = conn.get_server_pid()
    await conn.execute("SET application_name = 'left by a caller'")
    await pool.release(conn)
    async with pool.acquire() as again:
        assert again.get_server_pid() == pid
        assert await again.fetchval("SHOW application_name") == "memsvc"
    # Marked clean: the reset sends nothing, so a (deliberately planted)
    # session setting survives; memsvc's own statements never leave one.
    conn = await pool.acquire()
    await conn.execute("SET application_name = 'planted'")
    conn.mark_clean()
    await pool.release(conn)
    async with pool.acquire() as again:
        assert again.get_server_pid() == pid
        assert await again.fetchval("SHOW application_name") == "planted"
        await again.execute("RESET application_name")


async def test_connections_with_state_are_reset_even_when_marked_clean(
    service: MemoryService,
) -> None:
    pool = service.pool
    # Inside a transaction: asyncpg rolls it back on the way back.
    conn = await pool.acquire()
    transaction = conn.transaction()
    await transaction.start()
    await conn.execute("CREATE TEMP TABLE release_probe (x int) ON COMMIT DROP")
    conn.mark_clean()
    await pool.release(conn)
    async with pool.acquire() as conn:
        assert not conn.is_in_transaction()
        assert await conn.fetchval("SELECT to_regclass('pg_temp.release_probe')") is None


async def test_cancelled_searches_and_reads_return_their_connections(
    service: MemoryService, scope: Scope
) -> None:
    await service.memories.add_many(scope, [f"note {i} about the deploy" for i in range(50)])
    pool = service.pool
    repository = service.memories
    in_use: set[int] = set()
    handed_twice: list[int] = []

    async def slow_read(conn: asyncpg.Connection) -> Any:
        # The backend's pid names the connection whatever object wraps it.
        key = conn.get_server_pid()
        if key in in_use:
            handed_twice.append(key)
        in_use.add(key)
        try:
            return await conn.fetchval("SELECT pg_sleep($1::float8 / 1000)", random.randint(0, 20))
        finally:
            in_use.discard(key)

    async def slow_transaction() -> None:
        async with repository._transaction(tenant=scope.tenant) as conn:
            await conn.execute("SELECT pg_sleep(0.01)")

    async def one(i: int) -> None:
        kind = i % 4
        if kind == 0:
            await repository._read(None, slow_read, tenant=scope.tenant)
        elif kind == 1:
            await slow_transaction()
        elif kind == 2:
            await repository.search(scope, "deploy", k=5, mode="text")
        else:
            await repository.search(scope, "deploy note", k=5)

    rng = random.Random(7)
    for _ in range(6):
        tasks = [asyncio.create_task(one(i)) for i in range(40)]
        # Cancel at every stage: before the first step, mid-statement, mid-release.
        for task in rng.sample(tasks, 20):
            await asyncio.sleep(rng.random() * 0.005)
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        assert all(isinstance(r, asyncio.CancelledError) for r in failures), failures
    assert handed_twice == []
    # Every connection is back in the pool, none inside a transaction.
    for _ in range(200):
        if pool.get_idle_size() == pool.get_size():
            break
        await asyncio.sleep(0.01)
    assert pool.get_idle_size() == pool.get_size()
    conns = [await pool.acquire() for _ in range(pool.get_size())]
    try:
        for conn in conns:
            # The server's own word (ReadyForQuery's status) after a statement.
            await conn.fetchval("SELECT 1")
            assert not conn.is_in_transaction()
    finally:
        for conn in conns:
            await pool.release(conn)
    async with pool.acquire() as conn:
        open_transactions = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'memsvc' AND state LIKE 'idle in transaction%'"
        )
    assert open_transactions == 0
    # And the service still works.
    assert len(await repository.search(scope, "deploy", k=5, mode="text")) == 5
