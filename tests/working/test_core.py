"""Core working-memory behaviour, on standalone Redis, the in-process store and Redis Cluster."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest
from redis.asyncio.cluster import RedisCluster as ClusterClient

from memsvc.core.models import TaskState
from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.testing.redis import RedisCluster
from memsvc.working import RedisStore, WorkingMemory, open_working_store

from .conftest import MemoryFactory


@pytest.fixture(params=["redis", "local", "cluster"])
def store_kind(request: pytest.FixtureRequest) -> str:
    """These tests also run through redis-py's RedisCluster client on a 3-node cluster."""
    return str(request.param)


async def test_set_then_get_returns_the_value(memory: WorkingMemory) -> None:
    value = {"step": 1, "items": [1, 2.5, "three", None, True], "nested": {"a": []}}
    await memory.set("draft", value)
    assert await memory.get("draft") == value


async def test_get_of_a_missing_key_returns_the_default(memory: WorkingMemory) -> None:
    assert await memory.get("missing") is None
    assert await memory.get("missing", default=42) == 42


async def test_set_overwrites(memory: WorkingMemory) -> None:
    await memory.set("k", 1)
    await memory.set("k", "two")
    assert await memory.get("k") == "two"
    assert await memory.list_keys() == ["k"]


async def test_delete_reports_whether_the_key_existed(memory: WorkingMemory) -> None:
    await memory.set("k", 1)
    assert await memory.exists("k")
    assert await memory.delete("k") is True
    assert not await memory.exists("k")
    assert await memory.delete("k") is False
    assert await memory.get_all() == {}


async def test_list_keys_filters_with_a_glob(memory: WorkingMemory) -> None:
    for key in ["plan:a", "plan:b", "notes", "Plan:c"]:
        await memory.set(key, key)
    assert await memory.list_keys() == ["Plan:c", "notes", "plan:a", "plan:b"]
    assert await memory.list_keys("plan:*") == ["plan:a", "plan:b"]
    assert await memory.list_keys("?otes") == ["notes"]


async def test_get_all_holds_user_keys_only(memory: WorkingMemory) -> None:
    await memory.set("a", 1)
    await memory.set("b", [2])
    await memory.set_task_state(TaskState(task_id="t"))
    await memory.append_scratchpad("thinking")
    assert await memory.get_all() == {"a": 1, "b": [2]}


async def test_clear_deletes_user_keys_and_keeps_task_state_and_scratchpad(
    memory: WorkingMemory,
) -> None:
    for i in range(5):
        await memory.set(f"k{i}", i)
    await memory.set_task_state(TaskState(task_id="t", status="running"))
    await memory.append_scratchpad("note")

    assert await memory.clear() == 5

    assert await memory.get_all() == {}
    assert await memory.list_keys() == []
    state = await memory.get_task_state()
    assert state is not None and state.status == "running"
    assert await memory.get_scratchpad() == ["note"]
    assert await memory.clear() == 0


async def test_task_state_round_trips_with_datetimes(memory: WorkingMemory) -> None:
    started = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    state = TaskState(
        task_id="t-1",
        task_type="edit",
        description="rewrite the intro",
        status="running",
        current_step=2,
        total_steps=5,
        progress_percent=40.0,
        context={"file": "intro.md", "tries": [1, 2]},
        started_at=started,
    )
    await memory.set_task_state(state)
    stored = await memory.get_task_state()
    assert stored is not None
    assert stored.started_at == started
    assert isinstance(stored.updated_at, datetime)
    assert stored == dataclasses.replace(state, updated_at=stored.updated_at)
    assert state.updated_at is None  # the caller's object is not modified


async def test_get_task_state_is_none_until_set(memory: WorkingMemory) -> None:
    assert await memory.get_task_state() is None
    assert await memory.update_task_progress(current_step=1) is None
    assert await memory.get_task_state() is None


async def test_update_task_progress_changes_only_given_fields_and_clamps(
    memory: WorkingMemory,
) -> None:
    await memory.set_task_state(TaskState(task_id="t", total_steps=4, status="pending"))
    updated = await memory.update_task_progress(current_step=3, progress_percent=150)
    assert updated is not None
    assert (updated.current_step, updated.progress_percent, updated.status) == (3, 100.0, "pending")
    updated = await memory.update_task_progress(progress_percent=-5, status="done")
    assert updated is not None
    assert (updated.current_step, updated.progress_percent, updated.status) == (3, 0.0, "done")
    assert updated.total_steps == 4
    assert await memory.get_task_state() == updated


async def test_scratchpad_appends_in_order_with_timestamps(memory: WorkingMemory) -> None:
    for note in ["first", "second", "third"]:
        await memory.append_scratchpad(note)
    assert await memory.get_scratchpad() == ["first", "second", "third"]
    entries = await memory.get_scratchpad_with_timestamps()
    assert [entry["content"] for entry in entries] == ["first", "second", "third"]
    for entry in entries:
        assert set(entry) == {"content", "timestamp"}
        datetime.fromisoformat(entry["timestamp"])


async def test_scratchpad_keeps_the_newest_entries(make_memory: MemoryFactory) -> None:
    memory = await make_memory(scratchpad_max_entries=3)
    for i in range(7):
        await memory.append_scratchpad(f"n{i}")
    assert await memory.get_scratchpad() == ["n4", "n5", "n6"]


async def test_clear_scratchpad_returns_the_count(memory: WorkingMemory) -> None:
    assert await memory.clear_scratchpad() == 0
    for i in range(4):
        await memory.append_scratchpad(str(i))
    await memory.set("kept", True)
    assert await memory.clear_scratchpad() == 4
    assert await memory.get_scratchpad() == []
    assert await memory.get("kept") is True


async def test_restore_brings_back_the_checkpointed_state(memory: WorkingMemory) -> None:
    await memory.set("a", {"v": 1})
    await memory.set("b", [1, 2])
    await memory.set_task_state(TaskState(task_id="t", current_step=1))
    await memory.append_scratchpad("before")
    checkpoint_id = await memory.create_checkpoint("before edit")
    before = (
        await memory.get_all(),
        await memory.get_task_state(),
        await memory.get_scratchpad_with_timestamps(),
    )

    await memory.set("a", "changed")
    await memory.delete("b")
    await memory.set("new", 1)
    await memory.update_task_progress(current_step=9, status="broken")
    await memory.append_scratchpad("after")

    await memory.restore_checkpoint(checkpoint_id)
    after = (
        await memory.get_all(),
        await memory.get_task_state(),
        await memory.get_scratchpad_with_timestamps(),
    )
    assert after == before


async def test_get_stats_counts_the_session(memory: WorkingMemory) -> None:
    await memory.set("a", 1)
    await memory.set("b", 2)
    await memory.append_scratchpad("x")
    stats = await memory.get_stats()
    assert stats["user_keys"] == 2
    assert stats["scratchpad_entries"] == 1
    assert stats["has_task_state"] is False
    assert stats["using_fallback"] is False
    assert stats["scope"]["session"] == "s-42"
    assert stats["backend"] in {"redis", "local"}
    datetime.fromisoformat(stats["created_at"])
    assert await memory.is_healthy()


async def test_keys_hold_any_printable_text(memory: WorkingMemory) -> None:
    keys = ["a b", "{tag}", "k:colon", "ünïcødé ✓", "x" * 255, "%7B", "a}b{c"]
    for key in keys:
        await memory.set(key, key)
    assert await memory.get_all() == {key: key for key in keys}


async def test_sessions_do_not_share_state(make_memory: MemoryFactory) -> None:
    first = await make_memory()
    other_scope = Scope(tenant="acme", project="bridge", agent="planner", session="s-43")
    second = await make_memory(scope=other_scope, store=first.store)
    await first.set("k", "first")
    await first.append_scratchpad("first")
    await second.set("k", "second")
    assert await first.get("k") == "first"
    assert await second.get("k") == "second"
    assert await second.get_scratchpad() == []
    assert await second.clear() == 1
    assert await first.get("k") == "first"


@pytest.mark.parametrize("store_kind", ["cluster"])
async def test_a_redis_cluster_url_opens_the_cluster_client(
    redis_cluster: RedisCluster, make_store: object
) -> None:
    host_port = redis_cluster.url.removeprefix("redis://")
    settings = Settings(redis_url=f"redis+cluster://{host_port}")
    store, fallback = await open_working_store(settings)
    try:
        assert isinstance(store, RedisStore) and not fallback
        assert isinstance(store.client, ClusterClient)
        memory = WorkingMemory(Scope("t", session="s"), store, settings)
        await memory.set("k", 1)
        await memory.append_scratchpad("note")
        assert await memory.get_all() == {"k": 1}
        assert await memory.get_scratchpad() == ["note"]
    finally:
        await store.close()


async def test_erasing_sessions_drops_each_under_the_scope_once_however_many_keys(
    make_memory: MemoryFactory,
) -> None:
    """More keys than one SCAN round (1,000): sessions span rounds, each counts once."""
    inside = [Scope("t", "p", "a", f"s{i}") for i in range(3)]
    outside = Scope("t", "q", "a", "s0")
    first = await make_memory(scope=inside[0])
    store = first.store
    for scope in [*inside, outside]:
        memory = await make_memory(scope=scope, store=store)
        for i in range(400):
            await memory.set(f"k{i}", i)
        await memory.append_scratchpad("note")
        await memory.set_task_state(TaskState(task_id="t1"))
    project = Scope("t", "p")
    assert await store.count_state(project, descendants=True) == 3 * (400 + 4)

    assert await store.erase_sessions(project, descendants=True) == 3

    assert await store.count_state(project, descendants=True) == 0
    assert await store.count_state(outside, descendants=False) == 400 + 4
    assert await store.erase_sessions(project, descendants=True) == 0
