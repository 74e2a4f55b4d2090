"""Durable checkpoints: atomic snapshot and restore, stored in the checkpoint repository."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest

from memsvc.core.errors import NotFoundError, WorkingMemoryError
from memsvc.core.models import TaskState
from memsvc.core.settings import Settings
from memsvc.testing.redis import RedisServer
from memsvc.working import LocalStore, RedisStore, WorkingMemory

from .conftest import SESSION, InMemoryCheckpointRepository, MemoryFactory

OLD = {f"old-{i}": "old" for i in range(200)}
NEW = {f"new-{i}": "new" for i in range(200)}


@pytest.fixture
def checkpoint_repository(memsvc_service: Any) -> Any:
    """The real CheckpointRepository on a fresh PostgreSQL database.

    These tests are about durability, so they store checkpoints where users
    do; the rest of the working-memory suite uses the in-memory double.
    """
    return memsvc_service.checkpoints


async def fill(memory: WorkingMemory, values: dict[str, Any]) -> None:
    await memory.clear()
    await asyncio.gather(*(memory.set(key, value) for key, value in values.items()))


def classify(snapshot: dict[str, Any]) -> str:
    if snapshot == OLD:
        return "old"
    if snapshot == NEW:
        return "new"
    return "mixed"


async def read_until(memory: WorkingMemory, stop: asyncio.Event | threading.Event) -> list[str]:
    seen: list[str] = []
    while not stop.is_set():
        seen.append(classify(await memory.get_all()))
        await asyncio.sleep(0)
    return seen


async def test_checkpoint_is_stored_in_the_repository(
    memory: WorkingMemory, checkpoint_repository: InMemoryCheckpointRepository
) -> None:
    await memory.set("k", {"v": 1})
    await memory.set_task_state(TaskState(task_id="t", current_step=2))
    await memory.append_scratchpad("note")
    checkpoint_id = await memory.create_checkpoint("before edit")

    stored = await checkpoint_repository.get(uuid.UUID(checkpoint_id))
    assert stored.scope == SESSION
    assert stored.description == "before edit"
    assert stored.data["values"] == {"k": {"v": 1}}
    assert stored.data["task_state"]["current_step"] == 2
    assert [entry["content"] for entry in stored.data["scratchpad"]] == ["note"]


async def test_restore_replaces_the_whole_state(memory: WorkingMemory) -> None:
    await memory.set("kept", 1)
    checkpoint_id = await memory.create_checkpoint()
    await memory.set("added-later", 2)
    await memory.set_task_state(TaskState(task_id="later"))
    await memory.append_scratchpad("later")

    await memory.restore_checkpoint(checkpoint_id)

    assert await memory.get_all() == {"kept": 1}
    assert await memory.get_task_state() is None
    assert await memory.get_scratchpad() == []
    assert (await memory.get_stats())["user_keys"] == 1


async def test_restore_is_atomic_for_concurrent_readers(
    make_memory: MemoryFactory, store_kind: str
) -> None:
    memory = await make_memory()
    await fill(memory, OLD)
    old_id = await memory.create_checkpoint("old")
    await fill(memory, NEW)
    new_id = await memory.create_checkpoint("new")

    stop = threading.Event()
    readers = [asyncio.create_task(read_until(memory, stop))]
    thread_seen: list[str] = []
    thread = None
    if store_kind == "local":
        # The in-process store is also read from another thread, which can
        # interrupt a restore anywhere but inside its lock.
        thread = threading.Thread(
            target=lambda: thread_seen.extend(asyncio.run(read_until(memory, stop)))
        )
        thread.start()
    for _ in range(5):
        await memory.restore_checkpoint(old_id)
        await asyncio.sleep(0.01)
        await memory.restore_checkpoint(new_id)
        await asyncio.sleep(0.01)
    stop.set()
    seen = [kind for reader in readers for kind in await reader]
    if thread is not None:
        thread.join()
    seen += thread_seen

    assert "mixed" not in seen
    assert {"old", "new"} <= set(seen)


async def test_naive_restore_is_seen_half_done(memory: WorkingMemory) -> None:
    # Control: clearing, then setting keys one by one (the seed's restore) is
    # observed half-done by the same reader, so the test above can see mixing.
    await fill(memory, NEW)
    stop = asyncio.Event()
    reader = asyncio.create_task(read_until(memory, stop))
    await memory.clear()
    for key, value in OLD.items():
        await memory.set(key, value)
        await asyncio.sleep(0)
    stop.set()
    assert "mixed" in await reader


async def test_list_checkpoints_newest_first(memory: WorkingMemory) -> None:
    first = await memory.create_checkpoint("first")
    second = await memory.create_checkpoint("second")
    listed = await memory.list_checkpoints()
    assert [item["id"] for item in listed] == [second, first]
    assert [item["description"] for item in listed] == ["second", "first"]
    assert set(listed[0]) == {"id", "description", "created_at"}


async def test_delete_checkpoint(memory: WorkingMemory) -> None:
    checkpoint_id = await memory.create_checkpoint()
    assert await memory.delete_checkpoint(checkpoint_id) is True
    assert await memory.delete_checkpoint(checkpoint_id) is False
    assert await memory.list_checkpoints() == []
    with pytest.raises(NotFoundError):
        await memory.restore_checkpoint(checkpoint_id)


@pytest.mark.parametrize(
    "checkpoint_id", ["6f1c2d3e-0000-4000-8000-00000000abcd", "not-a-uuid", "", "../../x"]
)
async def test_unknown_or_malformed_ids_are_not_found(
    memory: WorkingMemory, checkpoint_id: str
) -> None:
    await memory.set("k", 1)
    with pytest.raises(NotFoundError):
        await memory.restore_checkpoint(checkpoint_id)
    assert await memory.delete_checkpoint(checkpoint_id) is False
    assert await memory.get_all() == {"k": 1}


async def test_another_sessions_checkpoint_is_not_found(make_memory: MemoryFactory) -> None:
    mine = await make_memory()
    theirs = await make_memory(scope=SESSION.with_session("other"), store=mine.store)
    await theirs.set("secret", 1)
    their_id = await theirs.create_checkpoint()
    with pytest.raises(NotFoundError):
        await mine.restore_checkpoint(their_id)
    assert await mine.delete_checkpoint(their_id) is False
    assert await mine.get_all() == {}
    assert [item["id"] for item in await theirs.list_checkpoints()] == [their_id]


async def test_checkpoints_need_a_repository(make_store: Any) -> None:
    settings = Settings()
    memory = WorkingMemory(SESSION, await make_store(), settings)
    for call in (
        memory.create_checkpoint(),
        memory.restore_checkpoint(str(uuid.uuid4())),
        memory.list_checkpoints(),
        memory.delete_checkpoint(str(uuid.uuid4())),
    ):
        with pytest.raises(WorkingMemoryError, match="database"):
            await call


async def test_checkpoint_survives_redis_restart(
    redis_server_factory: Any, checkpoint_repository: InMemoryCheckpointRepository
) -> None:
    server: RedisServer = redis_server_factory()
    settings = Settings(redis_url=server.url)
    store = RedisStore.from_url(server.url, settings)
    memory = WorkingMemory(SESSION, store, settings, checkpoints=checkpoint_repository)
    await memory.set("draft", {"step": 3})
    await memory.set_task_state(TaskState(task_id="t", current_step=3, total_steps=5))
    await memory.append_scratchpad("checked the span table")
    checkpoint_id = await memory.create_checkpoint("before restart")
    state_before = (await memory.get_all(), await memory.get_task_state())
    await store.close()

    server.restart()  # SIGKILL, then an empty server on the same port

    store = RedisStore.from_url(server.url, settings)
    try:
        memory = WorkingMemory(SESSION, store, settings, checkpoints=checkpoint_repository)
        assert await memory.get_all() == {}
        await memory.restore_checkpoint(checkpoint_id)
        assert (await memory.get_all(), await memory.get_task_state()) == state_before
        assert await memory.get_scratchpad() == ["checked the span table"]
    finally:
        await store.close()


async def test_restore_into_a_fresh_local_store(
    checkpoint_repository: InMemoryCheckpointRepository,
) -> None:
    settings = Settings()
    first = WorkingMemory(SESSION, LocalStore(settings), settings, checkpoint_repository)
    await first.set("k", [1, 2, 3])
    checkpoint_id = await first.create_checkpoint()
    second = WorkingMemory(SESSION, LocalStore(settings), settings, checkpoint_repository)
    await second.restore_checkpoint(checkpoint_id)
    assert await second.get_all() == {"k": [1, 2, 3]}


async def test_a_checkpoint_over_the_key_limit_is_refused(
    make_memory: MemoryFactory, checkpoint_repository: InMemoryCheckpointRepository
) -> None:
    roomy = await make_memory()
    for i in range(5):
        await roomy.set(f"k{i}", i)
    checkpoint_id = await roomy.create_checkpoint()
    tight = await make_memory(store=roomy.store, working_memory_max_keys=3)
    await roomy.clear()
    await roomy.set("survivor", 1)
    with pytest.raises(Exception, match="working_memory_max_keys"):
        await tight.restore_checkpoint(checkpoint_id)
    assert await tight.get_all() == {"survivor": 1}
