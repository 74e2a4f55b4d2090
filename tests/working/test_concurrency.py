"""Concurrent calls never lose writes; naive read-modify-write controls prove loss is visible."""

from __future__ import annotations

import asyncio
import threading

from memsvc.core.models import TaskState
from memsvc.core.settings import Settings
from memsvc.working import LocalStore, WorkingMemory

from .conftest import SESSION, MemoryFactory

# Fifty calls at once open as many Redis connections; on a loaded machine
# connecting takes longer than the default second (a dead Redis is not
# what these tests are about: tests/working/test_failures.py is).
BUSY_TIMEOUT_S = 10.0


async def naive_append(memory: WorkingMemory, entry: str) -> None:
    """The seed's bug: read the list, append in Python, write it back."""
    entries = await memory.get("log", [])
    await asyncio.sleep(0)  # let other tasks run between the read and the write
    entries.append(entry)
    await memory.set("log", entries)


async def test_concurrent_appends_keep_every_entry(make_memory: MemoryFactory) -> None:
    memory = await make_memory(redis_timeout_s=BUSY_TIMEOUT_S)
    entries = [f"entry {i}" for i in range(50)]
    await asyncio.gather(*(memory.append_scratchpad(entry) for entry in entries))
    stored = await memory.get_scratchpad()
    assert sorted(stored) == sorted(entries)


async def test_naive_read_modify_write_appends_lose_entries(make_memory: MemoryFactory) -> None:
    # Control: the same concurrency against the same backend loses writes when
    # the append is a read-modify-write, so the test above can see loss.
    memory = await make_memory(redis_timeout_s=BUSY_TIMEOUT_S)
    await asyncio.gather(*(naive_append(memory, f"entry {i}") for i in range(50)))
    assert len(await memory.get("log")) < 50


async def test_concurrent_appends_past_the_bound_keep_exactly_the_newest(
    make_memory: MemoryFactory,
) -> None:
    memory = await make_memory(redis_timeout_s=BUSY_TIMEOUT_S, scratchpad_max_entries=20)
    for i in range(50):
        await memory.append_scratchpad(f"old {i}")
    new = [f"new {i}" for i in range(20)]
    await asyncio.gather(*(memory.append_scratchpad(entry) for entry in new))
    # All 20 concurrent entries are newer than every old one: exactly they remain.
    assert sorted(await memory.get_scratchpad()) == sorted(new)

    await asyncio.gather(*(memory.append_scratchpad(f"more {i}") for i in range(50)))
    stored = await memory.get_scratchpad()
    assert len(stored) == 20
    assert len(set(stored)) == 20
    assert all(entry.startswith("more ") for entry in stored)


async def test_concurrent_progress_updates_never_lose_a_field(memory: WorkingMemory) -> None:
    await memory.set_task_state(TaskState(task_id="t", current_step=0, status="pending"))
    updates = []
    for _ in range(20):
        updates += [
            memory.update_task_progress(current_step=7),
            memory.update_task_progress(progress_percent=55.0),
            memory.update_task_progress(status="running"),
        ]
    await asyncio.gather(*updates)
    state = await memory.get_task_state()
    assert state is not None
    assert (state.current_step, state.progress_percent, state.status) == (7, 55.0, "running")
    assert state.task_id == "t"


async def test_naive_progress_updates_lose_fields(memory: WorkingMemory) -> None:
    # Control: the seed's update (read the whole state, change one field, write
    # the whole state back) loses fields under the same concurrency.
    await memory.set_task_state(TaskState(task_id="t", current_step=0, status="pending"))

    async def naive_update(**fields: object) -> None:
        state = await memory.get_task_state()
        assert state is not None
        await asyncio.sleep(0)
        for name, value in fields.items():
            setattr(state, name, value)
        await memory.set_task_state(state)

    lost = 0
    for _ in range(5):
        await memory.set_task_state(TaskState(task_id="t", current_step=0, status="pending"))
        await asyncio.gather(
            naive_update(current_step=7),
            naive_update(progress_percent=55.0),
            naive_update(status="running"),
        )
        state = await memory.get_task_state()
        assert state is not None
        lost += (state.current_step, state.progress_percent, state.status) != (7, 55.0, "running")
    assert lost > 0


async def test_concurrent_sets_of_distinct_keys_all_survive(memory: WorkingMemory) -> None:
    await asyncio.gather(*(memory.set(f"k{i}", i) for i in range(200)))
    assert await memory.get_all() == {f"k{i}": i for i in range(200)}


async def test_concurrent_clear_and_sets_never_leave_a_stale_index(memory: WorkingMemory) -> None:
    # Sets racing a clear either land before it (and are cleared) or after it
    # (and stay, listed and readable): the index and the values agree.
    await asyncio.gather(
        *(memory.set(f"k{i}", i) for i in range(50)),
        memory.clear(),
        *(memory.set(f"j{i}", i) for i in range(50)),
    )
    keys = await memory.list_keys()
    values = await memory.get_all()
    assert sorted(values) == keys
    for key, value in values.items():
        assert await memory.get(key) == value
    assert (await memory.get_stats())["user_keys"] == len(keys)


def run_in_threads(count: int, work: object) -> None:
    """Run ``work(index)`` (a coroutine function) in ``count`` threads, each with its own loop."""
    errors: list[BaseException] = []

    def target(index: int) -> None:
        try:
            asyncio.run(work(index))  # type: ignore[operator]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


def test_local_store_is_safe_across_threads() -> None:
    settings = Settings()
    store = LocalStore(settings)
    memory = WorkingMemory(SESSION, store, settings)
    asyncio.run(memory.set_task_state(TaskState(task_id="t")))

    async def work(index: int) -> None:
        for i in range(200):
            await memory.append_scratchpad(f"{index}-{i}")
            await memory.set(f"{index}-{i}", i)
            if i % 50 == 0:
                await memory.update_task_progress(current_step=index * 1000 + i)
        await memory.update_task_progress(status=f"thread {index} done")

    run_in_threads(8, work)

    async def check() -> None:
        assert len(await memory.get_scratchpad()) == 1_000  # bounded: newest 1,000 of 1,600
        assert len(set(await memory.get_scratchpad())) == 1_000
        values = await memory.get_all()
        assert len(values) == 1_600
        state = await memory.get_task_state()
        assert state is not None and state.status.endswith("done")

    asyncio.run(check())


def test_local_store_threads_keep_every_append_when_unbounded() -> None:
    settings = Settings(scratchpad_max_entries=10_000)
    memory = WorkingMemory(SESSION, LocalStore(settings), settings)

    async def work(index: int) -> None:
        for i in range(500):
            await memory.append_scratchpad(f"{index}-{i}")

    run_in_threads(8, work)
    entries = asyncio.run(memory.get_scratchpad())
    assert sorted(entries) == sorted(f"{t}-{i}" for t in range(8) for i in range(500))
    # Each thread's own entries stay in the order it appended them.
    for t in range(8):
        mine = [entry for entry in entries if entry.startswith(f"{t}-")]
        assert mine == [f"{t}-{i}" for i in range(500)]
