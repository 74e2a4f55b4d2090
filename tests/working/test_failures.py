"""Redis failures: fast WorkingMemoryError, fallback only when opening, never a silent switch."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Awaitable, Callable

import pytest

from memsvc.core.errors import RedisUnavailableError, WorkingMemoryError
from memsvc.core.models import TaskState
from memsvc.core.settings import Settings
from memsvc.testing.redis import RedisServer
from memsvc.working import LocalStore, RedisStore, WorkingMemory, open_working_store

from .conftest import SESSION

ServerFactory = Callable[[], RedisServer]


async def test_calls_fail_fast_when_redis_dies_mid_session(
    redis_server_factory: ServerFactory,
) -> None:
    server = redis_server_factory()
    settings = Settings(redis_url=server.url)
    store, fallback = await open_working_store(settings)
    assert isinstance(store, RedisStore) and not fallback
    memory = WorkingMemory(SESSION, store, settings)
    try:
        await memory.set("k", 1)
        await memory.set_task_state(TaskState(task_id="t"))
        server.kill()

        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: memory.get("k"),
            lambda: memory.set("k", 2),
            lambda: memory.append_scratchpad("x"),
            lambda: memory.update_task_progress(current_step=2),
            lambda: memory.get_all(),
            lambda: memory.clear(),
        ]
        for call in calls:
            started = time.monotonic()
            with pytest.raises(WorkingMemoryError) as caught:
                await call()
            assert time.monotonic() - started < 2.0
            # The redis-py error is kept as the cause, never raised itself.
            assert caught.value.__cause__ is not None
        assert not await memory.is_healthy()
        assert not memory.is_using_fallback
    finally:
        await store.close()


async def test_calls_fail_within_the_timeout_when_redis_hangs(
    redis_server_factory: ServerFactory,
) -> None:
    server = redis_server_factory()
    settings = Settings(redis_url=server.url, redis_timeout_s=0.5)
    store = RedisStore.from_url(server.url, settings)
    memory = WorkingMemory(SESSION, store, settings)
    try:
        await memory.set("k", 1)
        os.kill(server.pid, signal.SIGSTOP)  # alive but silent, like a network partition
        started = time.monotonic()
        with pytest.raises(WorkingMemoryError):
            await memory.get("k")
        assert time.monotonic() - started < 2.0
    finally:
        os.kill(server.pid, signal.SIGCONT)
        await store.close()


async def test_calls_work_again_once_redis_is_back(redis_server_factory: ServerFactory) -> None:
    server = redis_server_factory()
    settings = Settings(redis_url=server.url)
    store = RedisStore.from_url(server.url, settings)
    memory = WorkingMemory(SESSION, store, settings)
    try:
        await memory.set("k", 1)
        server.kill()
        with pytest.raises(WorkingMemoryError):
            await memory.set("k", 2)
        server.start()
        # Same store, new server: the Lua scripts are loaded again on demand.
        await memory.set("k", 3)
        assert await memory.get("k") == 3
        assert memory.store is store
    finally:
        await store.close()


async def test_opening_while_redis_is_down_falls_back_to_a_local_store(
    redis_server_factory: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    server = redis_server_factory()
    server.kill()
    settings = Settings(redis_url=server.url)
    started = time.monotonic()
    store, fallback = await open_working_store(settings)
    assert time.monotonic() - started < 2.0
    assert fallback is True
    assert isinstance(store, LocalStore)
    memory = WorkingMemory(SESSION, store, settings)
    assert memory.is_using_fallback
    assert (await memory.get_stats())["using_fallback"] is True
    await memory.set("k", 1)
    assert await memory.get("k") == 1
    assert "falls back" in caplog.text


async def test_opening_fails_when_redis_is_required_and_down(
    redis_server_factory: ServerFactory,
) -> None:
    server = redis_server_factory()
    server.kill()
    settings = Settings(redis_url=server.url, working_memory_require_redis=True)
    started = time.monotonic()
    with pytest.raises(WorkingMemoryError, match="working_memory_require_redis"):
        await open_working_store(settings)
    assert time.monotonic() - started < 2.0


async def test_for_session_without_redis_url_uses_a_private_local_store() -> None:
    memory = await WorkingMemory.for_session(
        "s-1", "proj", "agent-7", tenant="acme", settings=Settings()
    )
    async with memory:
        assert memory.scope.as_dict() == {
            "tenant": "acme",
            "project": "proj",
            "agent": "agent-7",
            "session": "s-1",
        }
        assert isinstance(memory.store, LocalStore)
        assert not memory.is_using_fallback
        await memory.set("k", 1)
        assert await memory.get("k") == 1


async def test_for_session_with_redis_url_opens_redis(redis_url: str) -> None:
    memory = await WorkingMemory.for_session("s-1", settings=Settings(redis_url=redis_url))
    async with memory:
        assert isinstance(memory.store, RedisStore)
        assert await memory.is_healthy()


async def test_removals_on_the_fallback_store_reach_redis_or_fail_naming_it(
    redis_server_factory: ServerFactory,
) -> None:
    """clear, delete and clear_scratchpad must not report success while Redis,
    which other processes read, still holds what they removed."""
    server = redis_server_factory()
    settings = Settings(redis_url=server.url, redis_timeout_s=0.2)
    store, _ = await open_working_store(settings)
    memory = WorkingMemory(SESSION, store, settings)
    await memory.set("a", 1)
    await memory.set("b", 2)
    await memory.append_scratchpad("note")
    await store.close()
    os.kill(server.pid, signal.SIGSTOP)  # alive, holding the session, but silent

    fallback, using_fallback = await open_working_store(settings)
    assert using_fallback
    memory = WorkingMemory(SESSION, fallback, settings)
    try:
        await memory.set("a", 10)  # ordinary work goes on, in process
        removals: list[Callable[[], Awaitable[object]]] = [
            lambda: memory.clear(),
            lambda: memory.delete("a"),
            lambda: memory.clear_scratchpad(),
        ]
        for removal in removals:
            started = time.monotonic()
            with pytest.raises(RedisUnavailableError, match=r"Redis at redis://"):
                await removal()
            assert time.monotonic() - started < 5.0  # a bounded retry
        assert await memory.get("a") == 10  # nothing removed

        os.kill(server.pid, signal.SIGCONT)  # Redis answers again: removals reach it too
        # Results are this process's view (the fallback's), as for every other call.
        assert await memory.delete("b") is False  # only Redis held it
        assert await memory.clear() == 1
        assert await memory.clear_scratchpad() == 0
        assert memory.is_using_fallback
    finally:
        os.kill(server.pid, signal.SIGCONT)
        await fallback.close()
    redis_store = RedisStore.from_url(server.url, settings)
    try:
        assert await redis_store.list_keys(SESSION) == []
        assert await redis_store.get_scratchpad(SESSION) == []
    finally:
        await redis_store.close()
