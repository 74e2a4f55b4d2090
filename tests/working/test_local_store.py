"""The in-process store keeps memory bounded: least recently used sessions are dropped whole."""

from __future__ import annotations

from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.working import LocalStore, WorkingMemory


def memories(store: LocalStore, settings: Settings, count: int) -> list[WorkingMemory]:
    return [WorkingMemory(Scope("t", session=f"s{i}"), store, settings) for i in range(count)]


async def test_sessions_past_the_limit_evict_the_least_recently_used() -> None:
    settings = Settings(working_memory_max_sessions=3)
    store = LocalStore(settings)
    first, second, third, fourth = memories(store, settings, 4)
    await first.set("k", 1)
    await second.set("k", 2)
    await third.set("k", 3)
    assert await first.get("k") == 1  # first is now the most recently used

    await fourth.set("k", 4)

    assert store.session_count == 3
    assert await second.get("k") is None  # evicted whole
    assert [await m.get("k") for m in (first, third, fourth)] == [1, 3, 4]


async def test_the_session_count_stays_bounded() -> None:
    settings = Settings(working_memory_max_sessions=100)
    store = LocalStore(settings)
    for memory in memories(store, settings, 1_000):
        await memory.set("k", 1)
        await memory.append_scratchpad("x")
    assert store.session_count == 100


async def test_reads_of_unknown_sessions_create_nothing() -> None:
    settings = Settings(working_memory_max_sessions=2)
    store = LocalStore(settings)
    for memory in memories(store, settings, 10):
        assert await memory.get("k") is None
        assert await memory.get_all() == {}
        assert await memory.get_task_state() is None
        assert await memory.get_scratchpad() == []
        assert await memory.clear() == 0
    assert store.session_count == 0


async def test_close_drops_every_session() -> None:
    settings = Settings()
    store = LocalStore(settings)
    (memory,) = memories(store, settings, 1)
    await memory.set("k", 1)
    await store.close()
    assert store.session_count == 0
