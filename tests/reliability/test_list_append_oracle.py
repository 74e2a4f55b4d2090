"""Concurrency oracle: many clients append unique values to per-session lists
while others read them; an Elle-style checker proves the history consistent.

Lists are (a) the memories of a scope (append = ``add`` with a client id; the
list = ``list`` paged fully) and (b) working-memory scratchpads, on the
in-process store and on Redis. The control runs the same checker against a
naive read-modify-write list, which must show anomalies.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

import pytest

from memsvc import ConcurrencyError, MemoryService, Scope, Settings, StorageError, ValidationError
from memsvc.core.ids import new_id
from memsvc.working import LocalStore, WorkingMemory, WorkingStore, open_working_store
from tests.reliability.conftest import bounded
from tests.reliability.list_append import History, check

CALL_BOUND_S = 20.0


async def run_workload(
    history: History,
    keys: list[str],
    *,
    clients: int,
    operations: int,
    append: Callable[[str, str], Awaitable[None]],
    read: Callable[[str], Awaitable[list[str]]],
    read_share: float = 0.2,
    fail_share: float = 0.02,
    bad_value: Callable[[str], str] = lambda value: value + "\x00",
    seed: int = 7,
) -> None:
    """Drive ``clients`` concurrent clients through ``operations`` random operations.

    A share of appends carries an invalid value (a NUL byte), which must fail
    with ValidationError and never appear: those are the definite failures.
    """
    rng = random.Random(seed)
    budget = iter(range(operations))

    async def client() -> None:
        for _ in budget:
            key = rng.choice(keys)
            if rng.random() < read_share:
                invoked = history.tick()
                values = await bounded(read(key), CALL_BOUND_S)
                history.record_read(key, invoked, values)
                continue
            op = history.invoke_append(key)
            invalid = rng.random() < fail_share
            try:
                await bounded(
                    append(key, bad_value(op.value) if invalid else op.value), CALL_BOUND_S
                )
            except ValidationError:
                history.complete(op, "fail")
            except (StorageError, ConcurrencyError):
                history.complete(op, "info")
            else:
                assert not invalid, f"an invalid append of {op.value!r} was accepted"
                history.complete(op, "ok")

    await asyncio.gather(*(client() for _ in range(clients)))


# ---------------------------------------------------------------- memories


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_memory_lists_show_no_anomalies_under_concurrent_appends_and_reads(
    open_service,
) -> None:
    async with open_service(embedder=False) as service:
        await check_memory_lists(service, 3_000)


async def check_memory_lists(service: MemoryService, operations: int) -> None:
    """Run the list-append workload on memories and assert the checker finds nothing."""
    keys = [f"s{i}" for i in range(8)]
    scopes = {key: Scope(tenant="elle", agent="a", session=key) for key in keys}
    history = History()

    async def append(key: str, value: str) -> None:
        await service.memories.add(scopes[key], value, id=new_id())

    async def read(key: str) -> list[str]:
        values: list[str] = []
        after = None
        while True:
            page = await service.memories.list(scopes[key], limit=100, after=after)
            if not page:
                return values
            values.extend(m.content for m in page)
            after = page[-1].id

    await run_workload(history, keys, clients=16, operations=operations, append=append, read=read)
    final = {key: await read(key) for key in keys}
    assert history.operations == operations
    assert sum(op.outcome == "fail" for op in history.appends) > 0
    assert check(history, final, ordered=False) == []


# ---------------------------------------------------------------- scratchpads


def _scratchpad_settings(**overrides: object) -> Settings:
    return Settings(
        scratchpad_max_entries=100_000, working_memory_max_sessions=100_000, **overrides
    )


async def _check_scratchpads(store: WorkingStore, settings: Settings, operations: int) -> None:
    keys = [f"s{i}-{new_id().hex[:6]}" for i in range(8)]
    memories = {
        key: WorkingMemory(Scope(tenant="elle", session=key), store, settings) for key in keys
    }
    history = History()

    async def append(key: str, value: str) -> None:
        await memories[key].append_scratchpad(value)

    async def read(key: str) -> list[str]:
        return await memories[key].get_scratchpad()

    await run_workload(history, keys, clients=16, operations=operations, append=append, read=read)
    final = {key: await read(key) for key in keys}
    assert history.operations == operations
    assert sum(op.outcome == "fail" for op in history.appends) > 0
    assert check(history, final, ordered=True) == []


@pytest.mark.timeout(120)
async def test_local_scratchpads_show_no_anomalies_under_concurrent_appends_and_reads() -> None:
    settings = _scratchpad_settings()
    await _check_scratchpads(LocalStore(settings), settings, 4_000)


@pytest.mark.timeout(120)
async def test_redis_scratchpads_show_no_anomalies_under_concurrent_appends_and_reads(
    redis_url: str,
) -> None:
    settings = _scratchpad_settings(redis_url=redis_url, working_memory_require_redis=True)
    store, _ = await open_working_store(settings)
    try:
        await _check_scratchpads(store, settings, 4_000)
    finally:
        await store.close()


# ---------------------------------------------------------------- the control


@pytest.mark.timeout(60)
async def test_checker_finds_anomalies_in_a_naive_read_modify_write_list() -> None:
    """The JSON-file stores' pattern: read the list, append in Python, write it back.

    The checker must report lost appends here, or its silence above proves nothing.
    """
    settings = _scratchpad_settings()
    memory = WorkingMemory(Scope(tenant="elle", session="naive"), LocalStore(settings), settings)
    keys = ["a", "b"]
    history = History()

    async def append(key: str, value: str) -> None:
        if "\x00" in value:
            raise ValidationError("value", "must not contain NUL bytes")
        current = await memory.get(key, [])
        await asyncio.sleep(0)  # another client reads the same list meanwhile
        await memory.set(key, [*current, value])

    async def read(key: str) -> list[str]:
        values: list[str] = await memory.get(key, [])
        return values

    await run_workload(history, keys, clients=8, operations=400, append=append, read=read)
    final = {key: await read(key) for key in keys}
    anomalies = check(history, final, ordered=True)
    assert any(anomaly.startswith("lost") for anomaly in anomalies)
    assert any(anomaly.startswith(("stale read", "non-prefix read")) for anomaly in anomalies)
