"""Sessions never see each other's keys, whatever characters their ids hold."""

from __future__ import annotations

import asyncio

import pytest

from memsvc.core.models import TaskState
from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.working import RedisStore, WorkingMemory
from memsvc.working.keys import parse_key

from .conftest import MemoryFactory, StoreFactory

LOOKALIKES = [
    (Scope("a:b", "c", session="s"), Scope("a", "b:c", session="s")),
    (Scope("t", session="a:b"), Scope("t", "a", session="b")),
    (Scope("t", "p", session="{x}"), Scope("t", "p", session="x")),
    (Scope("t", "{p", session="x}"), Scope("t", "{p}", session="x")),
    (Scope("t", session="%7B"), Scope("t", session="{")),
    (Scope("t", "-", session="s"), Scope("t", None, "-", session="s")),
]


@pytest.mark.parametrize(("first_scope", "second_scope"), LOOKALIKES)
async def test_lookalike_scopes_do_not_share_keys(
    make_memory: MemoryFactory, first_scope: Scope, second_scope: Scope
) -> None:
    first = await make_memory(scope=first_scope)
    second = await make_memory(scope=second_scope, store=first.store)
    await first.set("k", "first")
    await first.set("only-first", 1)
    await second.set("k", "second")
    await first.append_scratchpad("first note")

    assert await first.get_all() == {"k": "first", "only-first": 1}
    assert await second.get_all() == {"k": "second"}
    assert await second.get_scratchpad() == []
    assert await second.clear() == 1
    assert await first.get("k") == "first"


async def test_a_thousand_sessions_each_see_exactly_their_own_keys(
    make_store: StoreFactory,
) -> None:
    settings = Settings(working_memory_max_sessions=2_000)
    store = await make_store(working_memory_max_sessions=2_000)
    memories = [
        WorkingMemory(Scope("acme", f"p{i % 7}", session=f"s:{i}"), store, settings)
        for i in range(1_000)
    ]
    gate = asyncio.Semaphore(50)

    async def fill(index: int, memory: WorkingMemory) -> None:
        async with gate:
            for k in range(10):
                await memory.set(f"k{k}", [index, k])

    await asyncio.gather(*(fill(i, memory) for i, memory in enumerate(memories)))
    for index, memory in enumerate(memories):
        assert await memory.get_all() == {f"k{k}": [index, k] for k in range(10)}


@pytest.mark.parametrize("store_kind", ["redis"])
async def test_every_redis_key_names_its_own_session(make_memory: MemoryFactory) -> None:
    memory = await make_memory(scope=Scope("a:b", "{c}", session="s%7D"))
    await memory.set("x", 1)
    await memory.set_task_state(TaskState(task_id="t"))
    await memory.append_scratchpad("n")
    store = memory.store
    assert isinstance(store, RedisStore)
    names = [name async for name in store.client.scan_iter()]
    assert len(names) == 5  # value, index, task, scratchpad, metadata
    for name in names:
        assert parse_key(name)[0] == memory.scope
