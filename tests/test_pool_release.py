"""Returning pooled connections: the inline release of clean connections is safe.

memsvc returns a connection it left clean without asyncpg's shielded task
(memsvc.db.pool.release). These tests hold it to what the shield guarantees:
no connection is ever handed to two callers at once, none comes back inside
a transaction or with session state, and a call cancelled at any point still
returns its connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Iterator
from typing import Any

import asyncpg

from memsvc import MemoryService, Scope
from memsvc.db.pool import release, take_idle, unproxied


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
        # The driver's connection, never a proxy: proxies are per acquire.
        key = id(unproxied(conn))
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


# Idle connections: memsvc's own timer (memsvc.db.pool._on_idle_timer) must
# close what asyncpg's would, and nothing else. A pool of our own, with a
# lifetime short enough to watch.
LIFETIME = 0.3


async def _short_lived_pool(dsn: str, *, min_size: int = 1) -> asyncpg.Pool:
    from memsvc.db.pool import MemsvcConnection, _reset_unless_clean

    pool: asyncpg.Pool = await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=3,
        connection_class=MemsvcConnection,
        reset=_reset_unless_clean,
        max_inactive_connection_lifetime=LIFETIME,
    )
    return pool


@contextlib.contextmanager
def _loop_errors() -> Iterator[list[dict[str, Any]]]:
    """What the event loop reports meanwhile (a timer callback's exception, say)."""
    errors: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: errors.append(context))
    try:
        yield errors
    finally:
        loop.set_exception_handler(None)


async def _take(pool: asyncpg.Pool) -> Any:
    return take_idle(pool) or await pool.acquire()


async def _give_back(pool: asyncpg.Pool, conn: Any) -> None:
    conn.mark_clean()
    await release(pool, conn)


async def _backend_pid(pool: asyncpg.Pool) -> int:
    conn = await _take(pool)
    try:
        pid: int = await conn.fetchval("SELECT pg_backend_pid()")
        return pid
    finally:
        await _give_back(pool, conn)


async def test_connections_idle_past_their_lifetime_close_down_to_min_size(
    memsvc_database_url: str,
) -> None:
    pool = await _short_lived_pool(memsvc_database_url)
    try:
        taken = [await _take(pool) for _ in range(3)]
        for conn in taken:
            assert await conn.fetchval("SELECT 1") == 1
        for conn in taken:
            await _give_back(pool, conn)
        assert pool.get_size() == 3
        await asyncio.sleep(LIFETIME * 4)
        # min_size stays open, as asyncpg's own timers leave it.
        assert pool.get_size() == 1
        assert await _backend_pid(pool) > 0
    finally:
        await pool.close()


async def test_a_connection_used_again_is_not_idle(memsvc_database_url: str) -> None:
    # No min_size: nothing but being used keeps a connection open.
    pool = await _short_lived_pool(memsvc_database_url, min_size=0)
    try:
        with _loop_errors() as errors:
            pid = await _backend_pid(pool)
            # Used every LIFETIME / 3 for three lifetimes: its timer fires
            # meanwhile and must wait again, not close it.
            for _ in range(9):
                await asyncio.sleep(LIFETIME / 3)
                assert await _backend_pid(pool) == pid
            # Held through several lifetimes: in use is not idle either.
            conn = await _take(pool)
            await asyncio.sleep(LIFETIME * 3)
            assert await conn.fetchval("SELECT pg_backend_pid()") == pid
            await _give_back(pool, conn)
            await asyncio.sleep(LIFETIME * 4)
            assert pool.get_size() == 0
            assert errors == []
    finally:
        await pool.close()


async def test_asyncpg_release_after_memsvc_took_the_connection(memsvc_database_url: str) -> None:
    # take_idle leaves memsvc's timer armed; asyncpg's release refuses to arm
    # its own over another, so memsvc's release cancels it first.
    pool = await _short_lived_pool(memsvc_database_url)
    try:
        with _loop_errors() as errors:
            extra = [await _take(pool) for _ in range(2)]
            for conn in extra:
                await _give_back(pool, conn)  # memsvc's timers armed on both
            conn = take_idle(pool)
            assert conn is not None
            await conn.execute("SET application_name = 'not clean'")
            await release(pool, conn)  # not marked clean: asyncpg's release and reset
            assert errors == []
            # And the timers asyncpg armed then close what is idle too.
            await asyncio.sleep(LIFETIME * 4)
            assert pool.get_size() == 1
            assert errors == []
    finally:
        await pool.close()
