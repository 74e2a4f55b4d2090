"""Durable session checkpoints: exact retention, newest first, bad input refused."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from memsvc import Checkpoint, MemoryService, NotFoundError, Scope, Settings, ValidationError
from memsvc.checkpoints.repository import CheckpointRepository


def with_keep_last(service: MemoryService, settings: Settings, keep: int) -> CheckpointRepository:
    """The service's checkpoint repository, with another retention setting."""
    changed = settings.model_copy(update={"checkpoint_keep_last": keep})
    return CheckpointRepository(service.pool, changed)


async def stored(service: MemoryService, scope: Scope) -> list[Checkpoint]:
    return await service.checkpoints.list(scope, limit=1000)


async def test_create_then_get_latest_and_list_newest_first(
    service: MemoryService, scope: Scope
) -> None:
    data = {"step": 1, "notes": ["a", "b"], "unicode": "héllo ✓"}
    first = await service.checkpoints.create(scope, data, description="before edit")
    assert first.scope == scope
    assert first.data == data
    assert first.size_bytes == len(
        '{"step":1,"notes":["a","b"],"unicode":"héllo ✓"}'.encode()
    )
    second = await service.checkpoints.create(scope, [1, 2, 3])
    third = await service.checkpoints.create(scope, "just a string")

    fetched = await service.checkpoints.get(first.id)
    assert (fetched.data, fetched.description, fetched.size_bytes) == (
        data, "before edit", first.size_bytes
    )
    assert (await service.checkpoints.get(third.id)).data == "just a string"
    latest = await service.checkpoints.latest(scope)
    assert (latest.id, latest.data) == (third.id, "just a string")

    listed = await service.checkpoints.list(scope)
    assert [c.id for c in listed] == [third.id, second.id, first.id]
    assert all(c.data is None for c in listed)  # summaries unless asked
    with_data = await service.checkpoints.list(scope, with_data=True)
    assert [c.data for c in with_data] == ["just a string", [1, 2, 3], data]


async def test_list_pages_by_object_or_id(service: MemoryService, scope: Scope) -> None:
    created = [await service.checkpoints.create(scope, {"i": i}) for i in range(7)]
    newest_first = [c.id for c in reversed(created)]
    page = await service.checkpoints.list(scope, limit=3)
    by_object = await service.checkpoints.list(scope, limit=3, after=page[-1])
    by_id = await service.checkpoints.list(scope, limit=3, after=str(page[-1].id))
    assert by_object == by_id
    last = await service.checkpoints.list(scope, limit=3, after=by_id[-1])
    assert [c.id for c in page + by_id + last] == newest_first


async def test_sessions_are_kept_apart(service: MemoryService, scope: Scope) -> None:
    other = scope.with_session("s-43")
    mine = await service.checkpoints.create(scope, 1)
    await service.checkpoints.create(other, 2)
    assert [c.id for c in await stored(service, scope)] == [mine.id]
    assert (await service.checkpoints.latest(other)).data == 2


async def test_retention_keeps_the_newest_n(
    service: MemoryService, settings: Settings, scope: Scope
) -> None:
    checkpoints = with_keep_last(service, settings, 3)
    created = [await checkpoints.create(scope, i) for i in range(6)]
    assert [c.id for c in await stored(service, scope)] == [c.id for c in created[:2:-1]]


async def test_30_concurrent_creates_keep_exactly_the_newest_5(
    service: MemoryService, settings: Settings, scope: Scope
) -> None:
    checkpoints = with_keep_last(service, settings, 5)
    observed_max = 0
    done = asyncio.Event()

    async def watch() -> None:
        # Sample the row count while creates race: it must never exceed N.
        nonlocal observed_max
        async with service.pool.acquire() as conn:
            while not done.is_set():
                count = await conn.fetchval(
                    f"SELECT count(*) FROM {settings.db_schema}.session_checkpoints"
                )
                observed_max = max(observed_max, count)
                await asyncio.sleep(0)

    watcher = asyncio.create_task(watch())
    created = await asyncio.gather(*(checkpoints.create(scope, {"n": i}) for i in range(30)))
    done.set()
    await watcher

    survivors = await stored(service, scope)
    newest = sorted(created, key=lambda c: (c.created_at, c.id), reverse=True)[:5]
    assert [c.id for c in survivors] == [c.id for c in newest]
    assert observed_max <= 5
    assert len({c.created_at for c in created}) == 30  # serialized: strictly ordered


async def test_racing_creates_and_prunes_never_drop_the_newest(
    service: MemoryService, settings: Settings, scope: Scope
) -> None:
    checkpoints = with_keep_last(service, settings, 4)
    results = await asyncio.gather(
        *(checkpoints.create(scope, i) for i in range(12)),
        *(checkpoints.prune(scope, 4) for _ in range(4)),
    )
    created = [r for r in results if isinstance(r, Checkpoint)]
    newest = sorted(created, key=lambda c: (c.created_at, c.id), reverse=True)[:4]
    assert [c.id for c in await stored(service, scope)] == [c.id for c in newest]


async def test_prune_and_delete(service: MemoryService, scope: Scope) -> None:
    created = [await service.checkpoints.create(scope, i) for i in range(5)]
    assert await service.checkpoints.prune(scope, 2) == 3
    assert await service.checkpoints.prune(scope, 2) == 0
    assert [c.id for c in await stored(service, scope)] == [created[4].id, created[3].id]
    assert await service.checkpoints.delete(created[4].id) is True
    assert await service.checkpoints.delete(created[4].id) is False
    assert (await service.checkpoints.latest(scope)).id == created[3].id
    assert await service.checkpoints.prune(scope, 0) == 1
    with pytest.raises(NotFoundError):
        await service.checkpoints.latest(scope)


async def test_unknown_id_and_empty_session_are_not_found(
    service: MemoryService, scope: Scope
) -> None:
    with pytest.raises(NotFoundError):
        await service.checkpoints.get(uuid.uuid4())
    with pytest.raises(NotFoundError):
        await service.checkpoints.latest(scope)
    assert await service.checkpoints.list(scope) == []
    assert await service.checkpoints.delete(uuid.uuid4()) is False


async def test_oversize_data_is_refused_and_nothing_written(
    service: MemoryService, settings: Settings, scope: Scope
) -> None:
    small = CheckpointRepository(
        service.pool, settings.model_copy(update={"max_checkpoint_bytes": 1000})
    )
    with pytest.raises(ValidationError) as info:
        await small.create(scope, {"blob": "x" * 1000})
    assert info.value.field == "data"
    await small.create(scope, {"blob": "x" * 900})
    assert len(await stored(service, scope)) == 1


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (float("nan"), "data"),
        ({"k": "nul\x00"}, "data"),
        ({1: "non-string key"}, "data"),
        (object(), "data"),
    ],
)
async def test_bad_data_is_refused(
    service: MemoryService, scope: Scope, data: object, field: str
) -> None:
    with pytest.raises(ValidationError) as info:
        await service.checkpoints.create(scope, data)
    assert info.value.field == field
    assert await stored(service, scope) == []


async def test_scope_without_session_is_refused(service: MemoryService) -> None:
    for call in (
        service.checkpoints.create(Scope("acme", "bridge", "planner"), {}),
        service.checkpoints.latest(Scope("acme")),
        service.checkpoints.list(Scope("acme", "bridge")),
        service.checkpoints.prune(Scope("acme"), 1),
    ):
        with pytest.raises(ValidationError) as info:
            await call
        assert info.value.field == "scope.session"


async def test_create_joins_a_callers_transaction(service: MemoryService, scope: Scope) -> None:
    async with service.pool.acquire() as conn:
        transaction = conn.transaction()
        await transaction.start()
        await service.checkpoints.create(scope, {"draft": True}, conn=conn)
        await transaction.rollback()
    assert await stored(service, scope) == []
