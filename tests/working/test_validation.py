"""Bad input is refused with a ValidationError naming the field, and nothing is written."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest

from memsvc.core.errors import ValidationError
from memsvc.core.models import TaskState
from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.core.time_limits import MAX_DURATION
from memsvc.working import LocalStore, WorkingMemory

from .conftest import MemoryFactory


async def assert_untouched(memory: WorkingMemory) -> None:
    assert await memory.get_all() == {}
    assert await memory.get_task_state() is None
    assert await memory.get_scratchpad() == []
    stats = await memory.get_stats()
    assert stats["user_keys"] == 0
    assert stats["created_at"] is None


BAD_KEYS: list[Any] = [
    "",
    "_task_state",
    "_anything",
    "nul\x00key",
    "line\nbreak",
    "tab\there",
    "del\x7f",
    "lone\ud800surrogate",
    "x" * 256,
    42,
    None,
    b"bytes",
]


@pytest.mark.parametrize("key", BAD_KEYS, ids=repr)
async def test_bad_keys_are_refused(memory: WorkingMemory, key: Any) -> None:
    with pytest.raises(ValidationError) as caught:
        await memory.set(key, 1)
    assert caught.value.field == "key"
    for call in (memory.get, memory.exists, memory.delete):
        with pytest.raises(ValidationError):
            await call(key)
    await assert_untouched(memory)


class NotJson:
    def __repr__(self) -> str:  # a stable test id, the same in every process
        return "NotJson()"


BAD_VALUES: list[Any] = [
    math.nan,
    math.inf,
    -math.inf,
    {"nested": [1, math.nan]},
    "nul\x00byte",
    {"key\x00": 1},
    "lone\ud800",
    {1: "int key"},
    {"a": {None: 1}},
    NotJson(),
    {1, 2},
    b"bytes",
]


@pytest.mark.parametrize("value", BAD_VALUES, ids=repr)
async def test_values_that_are_not_clean_json_are_refused(
    memory: WorkingMemory, value: Any
) -> None:
    with pytest.raises(ValidationError) as caught:
        await memory.set("k", value)
    assert caught.value.field in {"value", "value key"}
    await assert_untouched(memory)


async def test_deeply_nested_values_are_refused(memory: WorkingMemory) -> None:
    value: Any = 1
    for _ in range(600):
        value = [value]
    with pytest.raises(ValidationError) as caught:
        await memory.set("k", value)
    assert caught.value.field == "value"
    await assert_untouched(memory)


async def test_oversize_values_are_refused(make_memory: MemoryFactory) -> None:
    memory = await make_memory(working_memory_max_value_bytes=100)
    await memory.set("fits", "x" * 98)  # 100 bytes with the quotes
    with pytest.raises(ValidationError) as caught:
        await memory.set("too-big", "x" * 99)
    assert caught.value.field == "value"
    with pytest.raises(ValidationError) as caught:
        await memory.append_scratchpad("é" * 51)
    assert caught.value.field == "content"
    assert await memory.get_all() == {"fits": "x" * 98}
    assert await memory.get_scratchpad() == []


# 1e12 s and a timedelta of 8,000 years: past the longest duration memsvc accepts.
@pytest.mark.parametrize(
    "ttl", [0, -1, math.nan, math.inf, "5", True, 1e12, 1e300, timedelta(days=365 * 8000)]
)
async def test_bad_ttls_are_refused(memory: WorkingMemory, ttl: Any) -> None:
    with pytest.raises(ValidationError) as caught:
        await memory.set("k", 1, ttl_seconds=ttl)
    assert caught.value.field == "ttl_seconds"
    await assert_untouched(memory)


@pytest.mark.parametrize("content", ["nul\x00", "lone\ud800", 42, None])
async def test_bad_scratchpad_content_is_refused(memory: WorkingMemory, content: Any) -> None:
    with pytest.raises(ValidationError) as caught:
        await memory.append_scratchpad(content)
    assert caught.value.field == "content"
    await assert_untouched(memory)


@pytest.mark.parametrize(
    ("state", "field"),
    [
        (TaskState(task_id="t", context={"x": math.nan}), "task_state.context"),
        (TaskState(task_id="t", description="nul\x00"), "task_state.description"),
        (TaskState(task_id="t", progress_percent=math.nan), "task_state.progress_percent"),
        (TaskState(task_id=""), "task_state.task_id"),
        ({"task_id": "t"}, "task_state"),
    ],
)
async def test_bad_task_states_are_refused(memory: WorkingMemory, state: Any, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        await memory.set_task_state(state)
    assert caught.value.field == field
    await assert_untouched(memory)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"progress_percent": math.nan}, "progress_percent"),
        ({"progress_percent": "50"}, "progress_percent"),
        ({"current_step": 1.5}, "current_step"),
        ({"current_step": True}, "current_step"),
        ({"status": "nul\x00"}, "status"),
        ({"status": 3}, "status"),
    ],
)
async def test_bad_progress_updates_change_nothing(
    memory: WorkingMemory, kwargs: dict[str, Any], field: str
) -> None:
    await memory.set_task_state(TaskState(task_id="t", current_step=1, status="running"))
    before = await memory.get_task_state()
    with pytest.raises(ValidationError) as caught:
        await memory.update_task_progress(**kwargs)
    assert caught.value.field == field
    assert await memory.get_task_state() == before


async def test_the_key_limit_refuses_new_keys_but_allows_overwrites(
    make_memory: MemoryFactory,
) -> None:
    memory = await make_memory(working_memory_max_keys=3)
    for key in "abc":
        await memory.set(key, 1)
    with pytest.raises(ValidationError) as caught:
        await memory.set("d", 1)
    assert caught.value.field == "key"
    await memory.set("a", 2)
    assert await memory.get_all() == {"a": 2, "b": 1, "c": 1}
    await memory.delete("b")
    await memory.set("d", 1)
    assert sorted(await memory.list_keys()) == ["a", "c", "d"]


def test_a_scope_without_a_session_is_refused() -> None:
    settings = Settings()
    with pytest.raises(ValidationError) as caught:
        WorkingMemory(Scope(tenant="acme", project="p"), LocalStore(settings), settings)
    assert caught.value.field == "scope.session"


async def test_bad_list_pattern_is_refused(memory: WorkingMemory) -> None:
    with pytest.raises(ValidationError) as caught:
        await memory.list_keys(None)  # type: ignore[arg-type]
    assert caught.value.field == "pattern"


async def test_the_longest_ttl_is_kept(memory: WorkingMemory) -> None:
    await memory.set("k", 1, ttl_seconds=MAX_DURATION)
    assert await memory.get("k") == 1
