"""Time-to-live: per-key TTLs, the default TTL, and idle expiry of session state."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from memsvc.core.models import TaskState

from .conftest import MemoryFactory


async def test_a_key_expires_after_its_ttl(make_memory: MemoryFactory) -> None:
    memory = await make_memory()
    await memory.set("short", 1, ttl_seconds=0.3)
    await memory.set("long", 2, ttl_seconds=60)
    assert await memory.get("short") == 1
    await asyncio.sleep(0.5)
    assert await memory.get("short") is None
    assert not await memory.exists("short")
    assert await memory.get_all() == {"long": 2}
    assert await memory.list_keys() == ["long"]
    assert (await memory.get_stats())["user_keys"] == 1
    assert await memory.delete("short") is False


async def test_ttl_accepts_a_timedelta(make_memory: MemoryFactory) -> None:
    memory = await make_memory()
    await memory.set("k", 1, ttl_seconds=timedelta(milliseconds=200))  # type: ignore[arg-type]
    await asyncio.sleep(0.4)
    assert await memory.get("k") is None


async def test_setting_again_resets_the_ttl(make_memory: MemoryFactory) -> None:
    memory = await make_memory()
    await memory.set("k", 1, ttl_seconds=0.2)
    await memory.set("k", 2)  # default TTL: a day
    # Past the TTL the first write gave the session's key index on Redis.
    await asyncio.sleep(1.4)
    assert await memory.get("k") == 2
    assert await memory.list_keys() == ["k"]
    assert await memory.get_all() == {"k": 2}


async def test_the_default_ttl_applies_to_keys_and_idle_session_state(
    make_memory: MemoryFactory,
) -> None:
    memory = await make_memory(working_memory_default_ttl_seconds=1)
    await memory.set("k", 1)
    await memory.set_task_state(TaskState(task_id="t"))
    await memory.append_scratchpad("note")
    await asyncio.sleep(1.3)
    assert await memory.get("k") is None
    assert await memory.get_task_state() is None
    assert await memory.get_scratchpad() == []


async def test_writes_keep_session_state_alive(make_memory: MemoryFactory) -> None:
    memory = await make_memory(working_memory_default_ttl_seconds=1)
    await memory.set_task_state(TaskState(task_id="t"))
    for _ in range(3):
        await asyncio.sleep(0.5)
        await memory.append_scratchpad("still working")
    assert await memory.get_task_state() is not None


async def test_without_a_default_ttl_keys_do_not_expire(make_memory: MemoryFactory) -> None:
    memory = await make_memory(working_memory_default_ttl_seconds=None)
    await memory.set("forever", 1)
    await memory.set("short", 1, ttl_seconds=0.2)
    await asyncio.sleep(0.4)
    assert await memory.get_all() == {"forever": 1}
    created_at = datetime.fromisoformat((await memory.get_stats())["created_at"])
    assert abs((datetime.now(UTC) - created_at).total_seconds()) < 60


async def test_an_expired_key_frees_its_slot(make_memory: MemoryFactory) -> None:
    memory = await make_memory(working_memory_max_keys=2)
    await memory.set("a", 1, ttl_seconds=0.2)
    await memory.set("b", 2)
    await asyncio.sleep(0.4)
    await memory.set("c", 3)
    assert await memory.get_all() == {"b": 2, "c": 3}


async def test_restored_keys_keep_their_remaining_ttl(make_memory: MemoryFactory) -> None:
    memory = await make_memory()
    await memory.set("short", 1, ttl_seconds=0.5)
    await memory.set("long", 2, ttl_seconds=60)
    checkpoint_id = await memory.create_checkpoint()
    await memory.clear()
    await memory.restore_checkpoint(checkpoint_id)
    assert await memory.get_all() == {"short": 1, "long": 2}
    await asyncio.sleep(0.7)
    assert await memory.get_all() == {"long": 2}
