"""Fixtures of the working-memory suite.

Every behaviour runs on both backends (``store_kind``: a private real Redis,
flushed before each test, and the in-process store). Checkpoints go through
``checkpoint_repository``: for now an in-memory double of memsvc's own
``CheckpointRepository`` (same interface, JSON round trip like jsonb); switch
that fixture to the PostgreSQL repository to run the suite end to end.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis.asyncio as redis_asyncio

from memsvc.core.errors import NotFoundError
from memsvc.core.models import Checkpoint
from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.testing.redis import RedisCluster
from memsvc.working import LocalStore, RedisStore, WorkingMemory, WorkingStore

SESSION = Scope(tenant="acme", project="bridge", agent="planner", session="s-42")


class InMemoryCheckpointRepository:
    """Test double of ``memsvc.checkpoints.repository.CheckpointRepository``.

    Data goes through JSON text, as it would through a jsonb column, so a
    checkpoint that only survives in Python objects would fail here too.
    """

    def __init__(self) -> None:
        self._rows: dict[uuid.UUID, Checkpoint] = {}
        self._clock = itertools.count()
        self._epoch = datetime.now(UTC)

    async def create(self, scope: Scope, data: Any, *, description: str = "") -> Checkpoint:
        text = json.dumps(data, allow_nan=False)
        checkpoint = Checkpoint(
            id=uuid.uuid4(),
            scope=scope,
            description=description,
            data=json.loads(text),
            size_bytes=len(text.encode()),
            # Strictly increasing, so "newest first" is well defined.
            created_at=self._epoch + timedelta(microseconds=next(self._clock)),
        )
        self._rows[checkpoint.id] = checkpoint
        return checkpoint

    async def get(self, id: uuid.UUID, *, tenant: str | None = None) -> Checkpoint:
        try:
            return self._rows[id]
        except KeyError:
            raise NotFoundError(f"checkpoint {id} not found") from None

    async def list(
        self, scope: Scope, *, limit: int = 100, after: uuid.UUID | None = None
    ) -> list[Checkpoint]:
        rows = sorted(
            (row for row in self._rows.values() if row.scope == scope),
            key=lambda row: row.created_at,
            reverse=True,
        )
        if after is not None:
            cut = next((i for i, row in enumerate(rows) if row.id == after), len(rows))
            rows = rows[cut + 1 :]
        return rows[:limit]

    async def delete(self, id: uuid.UUID, *, tenant: str | None = None) -> bool:
        return self._rows.pop(id, None) is not None


@pytest.fixture
def checkpoint_repository() -> InMemoryCheckpointRepository:
    """The durable checkpoint repository WorkingMemory writes to."""
    return InMemoryCheckpointRepository()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """A private 3-master Redis Cluster, started on first use."""
    with RedisCluster() as cluster:
        yield cluster


async def flush(url: str) -> None:
    """FLUSHDB on one server."""
    client = redis_asyncio.Redis.from_url(url)
    try:
        await client.flushdb()
    finally:
        await client.aclose()


@pytest.fixture(params=["redis", "local"])
def store_kind(request: pytest.FixtureRequest) -> str:
    """Which backend the test runs on."""
    return str(request.param)


StoreFactory = Callable[..., Awaitable[WorkingStore]]
MemoryFactory = Callable[..., Awaitable[WorkingMemory]]


@pytest.fixture
async def make_store(
    store_kind: str, request: pytest.FixtureRequest
) -> AsyncIterator[StoreFactory]:
    """``await make_store(**settings)``: a fresh store of this test's backend."""
    stores: list[WorkingStore] = []
    url: str | None = None
    if store_kind == "redis":
        url = str(request.getfixturevalue("redis_url"))
        await flush(url)
    elif store_kind == "cluster":
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        for node in cluster.nodes:
            await flush(node.url)
        url = cluster.url

    async def factory(**overrides: Any) -> WorkingStore:
        settings = Settings(**overrides)
        store: WorkingStore
        if store_kind == "local":
            store = LocalStore(settings)
        else:
            assert url is not None
            store = RedisStore.from_url(url, settings, cluster=store_kind == "cluster")
        stores.append(store)
        return store

    yield factory
    for store in stores:
        await store.close()


@pytest.fixture
def make_memory(
    make_store: StoreFactory, checkpoint_repository: InMemoryCheckpointRepository
) -> MemoryFactory:
    """``await make_memory(scope=..., store=..., **settings)``: a WorkingMemory.

    Without ``store`` each call gets its own store (same backend, same data
    for Redis; a separate dict for the in-process store).
    """

    async def factory(
        scope: Scope = SESSION, store: WorkingStore | None = None, **overrides: Any
    ) -> WorkingMemory:
        if store is None:
            store = await make_store(**overrides)
        return WorkingMemory(scope, store, Settings(**overrides), checkpoints=checkpoint_repository)

    return factory


@pytest.fixture
async def memory(make_memory: MemoryFactory) -> WorkingMemory:
    """Working memory of session ``s-42`` with default settings."""
    return await make_memory()
