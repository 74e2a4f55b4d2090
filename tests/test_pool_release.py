"""Returning pooled connections: the inline release of clean connections is safe.

memsvc returns a connection it left clean without asyncpg's shielded task
(memsvc.db.pool.release). These tests hold it to what the shield guarantees:
no connection is ever handed to two callers at once, none comes back inside
a transaction or with session state, and a call cancelled at any point still
returns its connection.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import asyncpg

from memsvc import MemoryService, Scope
from memsvc.db.pool import release, take_idle


def _complete_without_suspending(coro: Any) -> bool:
    """Run a coroutine one step: True if it finished without waiting for anything."""
    try:
        coro.send(None)
    except StopIteration:
        return True
    coro.close()
    return False


async def test_a_clean_connection_is_released_without_suspending(service: MemoryService) -> None:
    pool = service.pool
    conn = await pool.acquire()
    await conn.fetchval("SELECT 1")
    conn.mark_clean()
    idle = pool.get_idle_size()
    # One step, no event-loop turn: nothing can cancel it half-way.
    assert _complete_without_suspending(release(pool, conn))
    assert pool.get_idle_size() == idle + 1
    # The proxy is detached, as after asyncpg's own release.
    try:
        await conn.fetchval("SELECT 1")
    except asyncpg.InterfaceError:
        pass
    else:
        raise AssertionError("a released connection still ran a statement")


async def test_connections_with_state_take_asyncpg_release(service: MemoryService) -> None:
    pool = service.pool
    # Inside a transaction: rolled back on the way back.
    conn = await pool.acquire()
    transaction = conn.transaction()
    await transaction.start()
    await conn.execute("CREATE TEMP TABLE release_probe (x int)")
    conn.mark_clean()
    await release(pool, conn)
    # Not marked clean (a caller's own use of svc.pool): reset in full.
    conn = await pool.acquire()
    await conn.execute("SET application_name = 'changed by a caller'")
    await release(pool, conn)
    async with pool.acquire() as conn:
        assert not conn.is_in_transaction()
        assert await conn.fetchval("SELECT to_regclass('pg_temp.release_probe')") is None
        assert await conn.fetchval("SHOW application_name") == "memsvc"


async def test_cancelled_searches_and_reads_return_their_connections(
    service: MemoryService, scope: Scope
) -> None:
    await service.memories.add_many(scope, [f"note {i} about the deploy" for i in range(50)])
    pool = service.pool
    repository = service.memories
    in_use: set[int] = set()
    handed_twice: list[int] = []

    async def slow_read(conn: asyncpg.Connection) -> Any:
        # The driver's connection, not the proxy: proxies are per acquire.
        key = id(conn._con)
        if key in in_use:
            handed_twice.append(key)
        in_use.add(key)
        try:
            return await conn.fetchval("SELECT pg_sleep($1::float8 / 1000)", random.randint(0, 20))
        finally:
            in_use.discard(key)

    async def slow_transaction() -> None:
        async with repository._transaction() as conn:
            await conn.execute("SELECT pg_sleep(0.01)")

    async def one(i: int) -> None:
        kind = i % 4
        if kind == 0:
            await repository._read(None, slow_read)
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


async def test_an_idle_connection_is_taken_without_suspending(service: MemoryService) -> None:
    pool = service.pool
    async with pool.acquire() as conn:
        await conn.fetchval("SELECT 1")  # at least one connection open and idle after
    idle = pool.get_idle_size()
    # asyncpg's internals as take_idle reads them: an upgrade that changes
    # them sends every read back to the slower acquire, and fails here.
    conn = take_idle(pool)
    assert conn is not None
    assert pool.get_idle_size() == idle - 1
    assert await conn.fetchval("SELECT 2") == 2
    conn.mark_clean()
    assert _complete_without_suspending(release(pool, conn))
    assert pool.get_idle_size() == idle
    # What acquire must handle itself is left to it, the holder in its place.
    await pool.expire_connections()
    stale = take_idle(pool)
    if stale is not None:
        await pool.release(stale)
    assert stale is None
    assert pool.get_idle_size() == idle
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT 3") == 3
