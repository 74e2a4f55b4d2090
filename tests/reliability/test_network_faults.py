"""A TCP proxy between memsvc and its servers injects latency, a black hole and
resets: every call returns or raises a typed error within its configured deadline.

PostgreSQL: ``command_timeout_s`` bounds each statement and each pool acquire
(``connect_timeout_s`` bounds a new connection). Redis: ``redis_timeout_s``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import pytest

from memsvc import MemoryService, Scope, Settings, StorageError, WorkingMemoryError
from memsvc.core.ids import new_id
from memsvc.embedding import HashingEmbedder
from memsvc.testing.postgres import settings_for_tests
from memsvc.testing.redis import RedisServer
from memsvc.working import WorkingMemory, open_working_store
from tests.reliability.conftest import bounded
from tests.reliability.proxy import FaultProxy, postgres_socket_path, tcp_upstream, unix_upstream

T = TypeVar("T")

COMMAND_TIMEOUT_S = 0.5
CONNECT_TIMEOUT_S = 0.5
REDIS_TIMEOUT_S = 0.3
MARGIN_S = 1.0  # event-loop and scheduling slack on a loaded machine
# One call: at most a pool acquire (or a new connection) plus one statement.
PG_DEADLINE_S = max(COMMAND_TIMEOUT_S, CONNECT_TIMEOUT_S) + COMMAND_TIMEOUT_S + MARGIN_S
REDIS_DEADLINE_S = 2 * REDIS_TIMEOUT_S + MARGIN_S
HANG_S = 30.0  # beyond this a call is hung: the test fails instead of stalling


def _proxied_dsn(dsn: str, port: int) -> tuple[str, FaultProxy]:
    parts = urlsplit(dsn)
    query = parse_qs(parts.query)
    if "host" in query and query["host"][0].startswith("/"):
        upstream = unix_upstream(postgres_socket_path(dsn))
    else:
        upstream = tcp_upstream(parts.hostname or "127.0.0.1", parts.port or 5432)
    user = parts.username or "postgres"
    password = f":{parts.password}" if parts.password else ""
    proxied = f"postgresql://{user}{password}@127.0.0.1:{port}{parts.path}"
    return proxied, FaultProxy(upstream)


@pytest.fixture
async def pg_proxy(memsvc_database_url: str) -> AsyncIterator[tuple[FaultProxy, MemoryService]]:
    """A service whose every PostgreSQL connection goes through a fault proxy."""
    _, proxy = _proxied_dsn(memsvc_database_url, 0)
    await proxy.start()
    dsn, _ = _proxied_dsn(memsvc_database_url, proxy.port)
    settings = settings_for_tests(
        dsn,
        pool_min_size=2,
        pool_max_size=4,
        command_timeout_s=COMMAND_TIMEOUT_S,
        connect_timeout_s=CONNECT_TIMEOUT_S,
    )
    service = await MemoryService.open(settings, embedder=HashingEmbedder())
    try:
        yield proxy, service
    finally:
        proxy.heal()
        await bounded(service.close(), HANG_S)
        await proxy.close()


async def _timed(call: Any) -> tuple[float, BaseException | None]:
    started = time.monotonic()
    try:
        await bounded(call, HANG_S)
    except (StorageError, WorkingMemoryError) as exc:
        return time.monotonic() - started, exc
    return time.monotonic() - started, None


def _pg_calls(service: MemoryService, scope: Scope) -> list[Any]:
    return [
        service.memories.add(scope, f"note {new_id()}"),
        service.memories.search(scope, "note", k=3),
        service.memories.count(scope),
        service.checkpoints.create(scope, {"step": 1}),
    ]


@pytest.mark.timeout(120)
async def test_postgres_calls_fail_within_deadline_behind_a_black_hole(
    pg_proxy: tuple[FaultProxy, MemoryService], scope: Scope
) -> None:
    proxy, service = pg_proxy
    await service.memories.add(scope, "stored before the partition")
    proxy.black_hole = True
    for call in _pg_calls(service, scope):
        elapsed, error = await _timed(call)
        assert isinstance(error, StorageError), f"a call succeeded through a black hole: {call}"
        assert elapsed < PG_DEADLINE_S, f"{elapsed:.2f}s is past the deadline"
    # Concurrent calls, more than the pool holds, are bounded too.
    outcomes = await asyncio.gather(*(_timed(service.memories.count(scope)) for _ in range(10)))
    for elapsed, error in outcomes:
        assert isinstance(error, StorageError)
        assert elapsed < PG_DEADLINE_S + COMMAND_TIMEOUT_S
    proxy.heal()
    proxy.reset()
    assert await bounded(_until_ok(lambda: service.memories.count(scope)), HANG_S) == 1


@pytest.mark.timeout(120)
async def test_postgres_calls_succeed_under_latency_below_the_deadline(
    pg_proxy: tuple[FaultProxy, MemoryService], scope: Scope
) -> None:
    proxy, service = pg_proxy
    proxy.latency_s = COMMAND_TIMEOUT_S / 10
    memory = await bounded(service.memories.add(scope, "slow but fine"), HANG_S)
    hits = await bounded(service.memories.search(scope, "slow", k=1), HANG_S)
    assert [hit.memory.id for hit in hits] == [memory.id]


@pytest.mark.timeout(120)
async def test_postgres_calls_fail_within_deadline_under_latency_past_it(
    pg_proxy: tuple[FaultProxy, MemoryService], scope: Scope
) -> None:
    proxy, service = pg_proxy
    proxy.latency_s = COMMAND_TIMEOUT_S * 3
    for call in _pg_calls(service, scope):
        elapsed, error = await _timed(call)
        assert isinstance(error, StorageError)
        assert elapsed < PG_DEADLINE_S


@pytest.mark.timeout(120)
async def test_postgres_reset_mid_query_gives_storage_error_and_retry_resolves_it(
    pg_proxy: tuple[FaultProxy, MemoryService], scope: Scope
) -> None:
    """The server runs the insert, the client never hears: a retry with the same
    client id returns the row, and there is exactly one."""
    proxy, service = pg_proxy
    memory_id = new_id()
    # An explicit embedding: the insert is the call's first statement (without
    # one, the duplicate lookup before embedding would be, and reads retry).
    vector = [1.0] + [0.0] * (service.settings.embedding_dim - 1)
    proxy.reset_on_reply = True
    elapsed, error = await _timed(
        service.memories.add(scope, "unknown outcome", id=memory_id, embedding=vector)
    )
    assert isinstance(error, StorageError)
    assert elapsed < PG_DEADLINE_S
    retried = await bounded(
        _until_ok(
            lambda: service.memories.add(scope, "unknown outcome", id=memory_id, embedding=vector)
        ),
        HANG_S,
    )
    assert retried.id == memory_id
    assert await service.memories.count(scope) == 1
    assert [e.kind for e in await service.memories.history(memory_id)] == ["created"]


@pytest.mark.timeout(120)
async def test_postgres_resets_during_a_stream_of_calls_only_give_typed_errors(
    pg_proxy: tuple[FaultProxy, MemoryService], scope: Scope
) -> None:
    proxy, service = pg_proxy
    acknowledged: dict[Any, str] = {}
    stop = asyncio.Event()

    async def client(c: int) -> None:
        i = 0
        while not stop.is_set():
            memory_id, content = new_id(), f"client {c} note {i}"
            i += 1
            elapsed, error = await _timed(service.memories.add(scope, content, id=memory_id))
            assert elapsed < PG_DEADLINE_S
            if error is None:
                acknowledged[memory_id] = content

    tasks = [asyncio.create_task(client(c)) for c in range(4)]
    try:
        for _ in range(10):
            await asyncio.sleep(0.1)
            proxy.reset()
    finally:
        stop.set()
        await bounded(asyncio.gather(*tasks), HANG_S)
    stored = await bounded(_until_ok(lambda: service.memories.get_many(list(acknowledged))), HANG_S)
    assert {m.id for m in stored} == set(acknowledged)


async def _until_ok(call: Callable[[], Awaitable[T]]) -> T:
    """Call until it stops raising StorageError (the pool reconnecting after a fault)."""
    while True:
        try:
            return await call()
        except StorageError:
            await asyncio.sleep(0.05)


# ------------------------------------------------------------------------ Redis


@pytest.fixture
async def redis_proxy(
    redis_server_factory: Callable[[], RedisServer],
) -> AsyncIterator[tuple[FaultProxy, WorkingMemory]]:
    """Working memory on a private Redis reached through a fault proxy."""
    server = redis_server_factory()
    proxy = await FaultProxy(tcp_upstream("127.0.0.1", server.port)).start()
    settings = Settings(
        redis_url=f"redis://127.0.0.1:{proxy.port}/0",
        redis_timeout_s=REDIS_TIMEOUT_S,
        working_memory_require_redis=True,
    )
    store, _ = await open_working_store(settings)
    memory = WorkingMemory(Scope(tenant="net", session=f"s-{new_id()}"), store, settings)
    try:
        yield proxy, memory
    finally:
        proxy.heal()
        await bounded(store.close(), HANG_S)
        await proxy.close()


def _redis_calls(memory: WorkingMemory) -> list[Any]:
    return [
        memory.set("draft", {"step": 1}),
        memory.get("draft"),
        memory.append_scratchpad("a note"),
        memory.get_scratchpad(),
        memory.get_all(),
    ]


@pytest.mark.timeout(60)
async def test_redis_calls_fail_within_deadline_behind_a_black_hole(
    redis_proxy: tuple[FaultProxy, WorkingMemory],
) -> None:
    proxy, memory = redis_proxy
    await memory.set("draft", {"step": 0})
    proxy.black_hole = True
    for call in _redis_calls(memory):
        elapsed, error = await _timed(call)
        assert isinstance(error, WorkingMemoryError)
        assert elapsed < REDIS_DEADLINE_S, f"{elapsed:.2f}s is past the deadline"
    proxy.heal()
    proxy.reset()
    assert await bounded(_until_redis_ok(lambda: memory.get("draft")), HANG_S) in (
        {"step": 0},
        {"step": 1},
    )


@pytest.mark.timeout(60)
async def test_redis_calls_succeed_under_latency_below_the_timeout(
    redis_proxy: tuple[FaultProxy, WorkingMemory],
) -> None:
    proxy, memory = redis_proxy
    proxy.latency_s = REDIS_TIMEOUT_S / 10
    await bounded(memory.append_scratchpad("first"), HANG_S)
    await bounded(memory.append_scratchpad("second"), HANG_S)
    assert await bounded(memory.get_scratchpad(), HANG_S) == ["first", "second"]


@pytest.mark.timeout(60)
async def test_redis_reset_mid_command_gives_working_memory_error_and_recovers(
    redis_proxy: tuple[FaultProxy, WorkingMemory],
) -> None:
    proxy, memory = redis_proxy
    await memory.append_scratchpad("before")
    proxy.reset_on_reply = True
    elapsed, error = await _timed(memory.append_scratchpad("unknown outcome"))
    assert isinstance(error, WorkingMemoryError)
    assert elapsed < REDIS_DEADLINE_S
    pad = await bounded(_until_redis_ok(memory.get_scratchpad), HANG_S)
    # The append ran on the server or not at all: never half, never twice.
    assert pad in (["before"], ["before", "unknown outcome"])


async def _until_redis_ok(call: Callable[[], Awaitable[T]]) -> T:
    while True:
        try:
            return await call()
        except WorkingMemoryError:
            await asyncio.sleep(0.05)
