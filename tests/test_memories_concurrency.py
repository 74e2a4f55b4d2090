"""The seed audit's scenarios: concurrent writers lose nothing and duplicate nothing."""

from __future__ import annotations

import asyncio

import pytest

from memsvc import ConflictError, MemoryService, Scope, Settings


@pytest.fixture
async def plain_service(settings: Settings) -> MemoryService:
    """A service without embedder: text-only memories, to measure the write path itself."""
    service = await MemoryService.open(settings)
    yield service  # type: ignore[misc]
    await service.close()


async def test_10_writers_x_20_adds_leave_200_memories(
    service: MemoryService, scope: Scope
) -> None:
    async def writer(w: int) -> None:
        for i in range(20):
            await service.memories.add(scope, f"writer {w} memory {i}", metadata={"w": w})

    await asyncio.gather(*(writer(w) for w in range(10)))
    assert await service.memories.count(scope) == 200


async def test_50_writers_x_200_adds_leave_10000_memories(
    plain_service: MemoryService, scope: Scope
) -> None:
    async def writer(w: int) -> None:
        for i in range(200):
            await plain_service.memories.add(scope, f"writer {w} memory {i}")

    await asyncio.gather(*(writer(w) for w in range(50)))
    assert await plain_service.memories.count(scope) == 10_000
    async with plain_service.pool.acquire() as conn:
        events = await conn.fetchval("SELECT count(*) FROM memsvc.memory_events")
    assert events == 10_000


async def test_racing_identical_adds_leave_one_row(service: MemoryService, scope: Scope) -> None:
    results = await asyncio.gather(
        *(service.memories.add(scope, "everyone says the same thing") for _ in range(20))
    )
    assert len({m.id for m in results}) == 1
    assert await service.memories.count(scope) == 1


async def test_racing_puts_of_one_key_leave_one_row(service: MemoryService, scope: Scope) -> None:
    results = await asyncio.gather(
        *(service.memories.put(scope, "status", f"value {i}") for i in range(20))
    )
    assert len({m.id for m in results}) == 1
    assert await service.memories.count(scope) == 1
    final = await service.memories.get_by_key(scope, "status")
    assert final.version == 20
    assert len(await service.memories.history(final.id)) == 20


async def test_racing_updates_with_expected_version_let_exactly_one_win(
    service: MemoryService, scope: Scope
) -> None:
    memory = await service.memories.add(scope, "contested")

    async def attempt(i: int) -> bool:
        try:
            await service.memories.update(memory.id, content=f"winner {i}", expected_version=1)
        except ConflictError:
            return False
        return True

    outcomes = await asyncio.gather(*(attempt(i) for i in range(10)))
    assert outcomes.count(True) == 1
    assert (await service.memories.get(memory.id)).version == 2


async def test_racing_patch_metadata_keeps_every_key(service: MemoryService, scope: Scope) -> None:
    memory = await service.memories.add(scope, "shared notes")
    await asyncio.gather(
        *(service.memories.patch_metadata(memory.id, {f"k{i}": i}) for i in range(30))
    )
    final = await service.memories.get(memory.id)
    assert final.metadata == {f"k{i}": i for i in range(30)}
    assert final.version == 31


async def test_naive_read_modify_write_control_loses_updates(
    service: MemoryService, scope: Scope
) -> None:
    """The control: the JSON-file stores' pattern (read, change in Python, write back).

    It must lose keys here, or the test above could not see a lost update.
    """
    memory = await service.memories.add(scope, "shared notes")

    async def naive_patch(i: int) -> None:
        current = await service.memories.get(memory.id)
        await asyncio.sleep(0.01)  # the other writers read the same version meanwhile
        await service.memories.update(memory.id, metadata={**current.metadata, f"k{i}": i})

    await asyncio.gather(*(naive_patch(i) for i in range(30)))
    final = await service.memories.get(memory.id)
    assert len(final.metadata) < 30


async def test_racing_adds_never_exceed_max_memories_per_scope(
    memsvc_database_url: str, scope: Scope
) -> None:
    from memsvc.testing.postgres import settings_for_tests

    limited = settings_for_tests(memsvc_database_url, max_memories_per_scope=10)
    async with MemoryService.open(limited) as service:
        await service.memories.add_many(scope, [f"existing {i}" for i in range(9)])

        async def attempt(i: int) -> bool:
            try:
                await service.memories.add(scope, f"racer {i}")
            except ConflictError:
                return False
            return True

        outcomes = await asyncio.gather(*(attempt(i) for i in range(20)))
        assert outcomes.count(True) == 1
        assert await service.memories.count(scope) == 10
        # A duplicate of stored content adds no row, so it is not refused.
        assert (await service.memories.add(scope, "existing 3")).content == "existing 3"
        with pytest.raises(ConflictError):
            await service.memories.put(scope, "k", "one too many")
        assert await service.memories.count(scope) == 10
