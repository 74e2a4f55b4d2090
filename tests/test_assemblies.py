"""Assemblies: named groups of memories whose counts and centroids stay exact."""

from __future__ import annotations

import asyncio
import random
import uuid
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

from memsvc import (
    ConcurrencyError,
    ConflictError,
    Memory,
    MemoryService,
    NotFoundError,
    Scope,
    Settings,
    ValidationError,
)

DIM = 384
OP_TIMEOUT_S = 30.0


def unit(rng: np.random.Generator) -> np.ndarray[Any, Any]:
    vector = rng.normal(size=DIM)
    return (vector / np.linalg.norm(vector)).astype(np.float32)


async def add_memories(
    service: MemoryService, scope: Scope, count: int, seed: int = 0, prefix: str = "m"
) -> list[Memory]:
    rng = np.random.default_rng(seed)
    return await service.memories.add_many(
        scope,
        [{"content": f"{prefix} {i}", "embedding": unit(rng)} for i in range(count)],
    )


async def assert_exact(service: MemoryService, assembly_id: uuid.UUID) -> int:
    """Counts equal the member rows, and the centroid the mean recomputed from scratch."""
    schema = service.settings.db_schema
    async with service.pool.acquire() as conn:
        row = await conn.fetchrow(
            f"SELECT member_count, embedded_count, embedding_sum, centroid "
            f"FROM {schema}.assemblies WHERE id = $1",
            assembly_id,
        )
        embeddings = await conn.fetch(
            f"SELECT m.embedding FROM {schema}.assembly_members am "
            f"JOIN {schema}.memories m ON m.tenant_id = am.tenant_id AND m.id = am.memory_id "
            f"WHERE am.assembly_id = $1",
            assembly_id,
        )
    assert row is not None
    present = [r["embedding"] for r in embeddings if r["embedding"] is not None]
    assert row["member_count"] == len(embeddings)
    assert row["embedded_count"] == len(present)
    if not present:
        assert row["centroid"] is None
        assert row["embedding_sum"] is None
    else:
        expected = np.mean(np.asarray(present, dtype=np.float64), axis=0)
        assert np.allclose(row["centroid"], expected, atol=1e-4)
    return len(embeddings)


# ------------------------------------------------------------------ basics


async def test_create_with_members_sets_count_and_centroid(
    service: MemoryService, scope: Scope
) -> None:
    memories = await add_memories(service, scope, 5)
    assembly = await service.assemblies.create(
        scope, "units", description="unit prefs", metadata={"k": 1},
        memory_ids=[m.id for m in memories] + [memories[0].id],  # repeats are ignored
    )
    assert assembly.member_count == 5
    assert assembly.version == 1
    assert assembly.metadata == {"k": 1}
    expected = np.mean([m.embedding for m in memories], axis=0)
    assert assembly.centroid is not None
    assert np.allclose(assembly.centroid, expected, atol=1e-5)
    assert await assert_exact(service, assembly.id) == 5
    assert (await service.assemblies.get(assembly.id)) == assembly
    assert (await service.assemblies.get_by_name(scope, "units")).id == assembly.id


async def test_duplicate_name_in_a_scope_is_a_conflict(
    service: MemoryService, scope: Scope
) -> None:
    await service.assemblies.create(scope, "units")
    with pytest.raises(ConflictError):
        await service.assemblies.create(scope, "units")
    # The same name elsewhere is fine.
    await service.assemblies.create(scope.with_session("other"), "units")


async def test_racing_creates_of_one_name_leave_one(service: MemoryService, scope: Scope) -> None:
    async def create() -> bool:
        try:
            await service.assemblies.create(scope, "contested")
        except ConflictError:
            return False
        return True

    outcomes = await asyncio.gather(*(create() for _ in range(10)))
    assert outcomes.count(True) == 1
    assert len(await service.assemblies.list(scope)) == 1


async def test_unknown_assembly_is_not_found(service: MemoryService, scope: Scope) -> None:
    missing = uuid.uuid4()
    with pytest.raises(NotFoundError):
        await service.assemblies.get(missing)
    with pytest.raises(NotFoundError):
        await service.assemblies.get_by_name(scope, "nope")
    with pytest.raises(NotFoundError):
        await service.assemblies.members(missing)
    memory = (await add_memories(service, scope, 1))[0]
    with pytest.raises(NotFoundError):
        await service.assemblies.add_members(missing, [memory.id])
    with pytest.raises(NotFoundError):
        await service.assemblies.remove_members(missing, [memory.id])
    assert await service.assemblies.delete(missing) is False


async def test_bad_input_is_refused(service: MemoryService, scope: Scope) -> None:
    with pytest.raises(ValidationError) as info:
        await service.assemblies.create(scope, "")
    assert info.value.field == "name"
    with pytest.raises(ValidationError) as info:
        await service.assemblies.create(scope, "x", memory_ids=["not-a-uuid"])
    assert info.value.field == "memory_ids[0]"
    with pytest.raises(ValidationError) as info:
        await service.assemblies.search(scope, [0.0] * 3)
    assert info.value.field == "query"


# ------------------------------------------------------------------ visibility


async def test_member_from_another_tenant_is_refused_and_nothing_written(
    service: MemoryService, scope: Scope
) -> None:
    mine = await add_memories(service, scope, 2)
    theirs = await add_memories(service, Scope("other-tenant", "bridge"), 1, seed=1)
    assembly = await service.assemblies.create(scope, "g", memory_ids=[mine[0].id])
    with pytest.raises(ValidationError) as info:
        await service.assemblies.add_members(assembly.id, [mine[1].id, theirs[0].id])
    assert info.value.field == "memory_ids"
    after = await service.assemblies.get(assembly.id)
    assert (after.member_count, after.version) == (1, assembly.version)
    assert await assert_exact(service, assembly.id) == 1
    with pytest.raises(ValidationError):
        await service.assemblies.create(scope, "new", memory_ids=[mine[1].id, theirs[0].id])
    with pytest.raises(NotFoundError):
        await service.assemblies.get_by_name(scope, "new")


async def test_member_from_a_scope_the_assembly_cannot_see_is_refused(
    service: MemoryService, scope: Scope
) -> None:
    sibling = await add_memories(service, scope.with_session("sibling"), 1)
    other_agent = await add_memories(service, Scope(scope.tenant, scope.project, "other"), 1)
    assembly = await service.assemblies.create(scope, "g")
    for memory in (*sibling, *other_agent):
        with pytest.raises(ValidationError) as info:
            await service.assemblies.add_members(assembly.id, [memory.id])
        assert info.value.field == "memory_ids"
    assert (await service.assemblies.get(assembly.id)).member_count == 0
    assert await assert_exact(service, assembly.id) == 0


async def test_ancestor_and_descendant_memories_may_join(
    service: MemoryService, scope: Scope
) -> None:
    project = Scope(scope.tenant, scope.project)
    tenant_wide = await add_memories(service, Scope(scope.tenant), 1, seed=1)
    project_wide = await add_memories(service, project, 1, seed=2)
    in_session = await add_memories(service, scope, 1, seed=3)
    # A session's assembly sees its ancestors' memories...
    session_group = await service.assemblies.create(
        scope, "g", memory_ids=[tenant_wide[0].id, project_wide[0].id, in_session[0].id]
    )
    assert session_group.member_count == 3
    # ...and a project's assembly sees the memories of everything under it.
    project_group = await service.assemblies.create(project, "g")
    project_group = await service.assemblies.add_members(
        project_group.id, [in_session[0].id, project_wide[0].id]
    )
    assert project_group.member_count == 2


async def test_expired_memory_cannot_join(service: MemoryService, scope: Scope) -> None:
    memory = await service.memories.add(scope, "fleeting", ttl=timedelta(seconds=0.2))
    await asyncio.sleep(0.3)
    with pytest.raises(ValidationError):
        await service.assemblies.create(scope, "g", memory_ids=[memory.id])


# ------------------------------------------------------------------ membership


async def test_add_and_remove_change_counts_by_what_changed(
    service: MemoryService, scope: Scope
) -> None:
    memories = await add_memories(service, scope, 6)
    ids = [m.id for m in memories]
    assembly = await service.assemblies.create(scope, "g", memory_ids=ids[:3])
    same = await service.assemblies.add_members(assembly.id, ids[:3])
    assert (same.member_count, same.version) == (3, 1)  # nothing new: no change
    grown = await service.assemblies.add_members(assembly.id, ids[2:6])
    assert (grown.member_count, grown.version) == (6, 2)
    await assert_exact(service, assembly.id)
    shrunk = await service.assemblies.remove_members(assembly.id, [*ids[:2], uuid.uuid4()])
    assert (shrunk.member_count, shrunk.version) == (4, 3)
    await assert_exact(service, assembly.id)
    empty = await service.assemblies.remove_members(assembly.id, ids)
    assert (empty.member_count, empty.centroid) == (0, None)
    await assert_exact(service, assembly.id)


async def test_members_without_embeddings_count_but_do_not_move_the_centroid(
    settings: Settings, scope: Scope
) -> None:
    async with MemoryService.open(settings) as plain:  # no embedder
        with_vector = await plain.memories.add(scope, "a", embedding=[1.0] + [0.0] * (DIM - 1))
        without = await plain.memories.add(scope, "b")
        assembly = await plain.assemblies.create(
            scope, "g", memory_ids=[with_vector.id, without.id]
        )
        assert assembly.member_count == 2
        assert assembly.centroid == with_vector.embedding
        assembly = await plain.assemblies.remove_members(assembly.id, [with_vector.id])
        assert (assembly.member_count, assembly.centroid) == (1, None)
        await assert_exact(plain, assembly.id)


async def test_deleting_a_member_memory_updates_its_assemblies(
    service: MemoryService, scope: Scope
) -> None:
    memories = await add_memories(service, scope, 4)
    ids = [m.id for m in memories]
    first = await service.assemblies.create(scope, "a", memory_ids=ids)
    second = await service.assemblies.create(scope, "b", memory_ids=ids[:2])
    assert await service.memories.delete(ids[0])
    assert (await service.assemblies.get(first.id)).member_count == 3
    assert (await service.assemblies.get(second.id)).member_count == 1
    await assert_exact(service, first.id)
    await assert_exact(service, second.id)
    assert await service.memories.delete_scope(scope) == 3
    for assembly_id in (first.id, second.id):
        emptied = await service.assemblies.get(assembly_id)
        assert (emptied.member_count, emptied.centroid) == (0, None)


async def test_delete_keeps_the_member_memories(service: MemoryService, scope: Scope) -> None:
    memories = await add_memories(service, scope, 3)
    assembly = await service.assemblies.create(scope, "g", memory_ids=[m.id for m in memories])
    assert await service.assemblies.delete(assembly.id) is True
    assert await service.assemblies.delete(assembly.id) is False
    assert len(await service.memories.get_many([m.id for m in memories])) == 3
    assert await service.assemblies.memberships(memories[0].id) == []


async def test_members_are_paged_in_id_order_and_skip_expired(
    service: MemoryService, scope: Scope
) -> None:
    memories = await add_memories(service, scope, 25)
    fleeting = await service.memories.add(scope, "fleeting", ttl=timedelta(seconds=0.3))
    assembly = await service.assemblies.create(
        scope, "g", memory_ids=[*(m.id for m in memories), fleeting.id]
    )
    await asyncio.sleep(0.4)
    pages: list[list[Memory]] = []
    after = None
    while True:
        page = await service.assemblies.members(assembly.id, limit=10, after=after)
        if not page:
            break
        pages.append(page)
        after = page[-1].id
    assert [len(page) for page in pages] == [10, 10, 5]
    seen = [m.id for page in pages for m in page]
    assert seen == sorted(m.id for m in memories)
    assert (await service.assemblies.get(assembly.id)).member_count == 26


async def test_memberships_lists_a_memorys_assemblies(
    service: MemoryService, scope: Scope
) -> None:
    memory, other = await add_memories(service, scope, 2)
    a = await service.assemblies.create(scope, "a", memory_ids=[memory.id])
    b = await service.assemblies.create(scope, "b", memory_ids=[memory.id, other.id])
    await service.assemblies.create(scope, "c", memory_ids=[other.id])
    assert [x.id for x in await service.assemblies.memberships(memory.id)] == [a.id, b.id]
    assert await service.assemblies.memberships(uuid.uuid4()) == []


async def test_list_pages_by_id(service: MemoryService, scope: Scope) -> None:
    created = [await service.assemblies.create(scope, f"g{i}") for i in range(5)]
    await service.assemblies.create(scope.with_session("elsewhere"), "g0")
    first = await service.assemblies.list(scope, limit=3)
    rest = await service.assemblies.list(scope, limit=3, after=first[-1].id)
    assert [a.id for a in first + rest] == [a.id for a in created]


async def test_update_with_stale_version_is_a_conflict(
    service: MemoryService, scope: Scope
) -> None:
    memory = (await add_memories(service, scope, 1))[0]
    assembly = await service.assemblies.create(scope, "g")
    renamed = await service.assemblies.update(
        assembly.id, name="h", description="d", expected_version=1
    )
    assert (renamed.name, renamed.description, renamed.version) == ("h", "d", 2)
    with pytest.raises(ConflictError):
        await service.assemblies.update(assembly.id, name="x", expected_version=1)
    # Membership changes bump the version too.
    await service.assemblies.add_members(assembly.id, [memory.id])
    with pytest.raises(ConflictError):
        await service.assemblies.update(assembly.id, metadata={"a": 1}, expected_version=2)
    updated = await service.assemblies.update(assembly.id, metadata={"a": 1}, expected_version=3)
    assert (updated.name, updated.metadata, updated.member_count) == ("h", {"a": 1}, 1)
    await service.assemblies.create(scope, "taken")
    with pytest.raises(ConflictError):
        await service.assemblies.update(assembly.id, name="taken")
    with pytest.raises(NotFoundError):
        await service.assemblies.update(uuid.uuid4(), name="x")


async def test_recompute_agrees_with_the_incremental_aggregates(
    service: MemoryService, scope: Scope
) -> None:
    memories = await add_memories(service, scope, 8)
    assembly = await service.assemblies.create(scope, "g", memory_ids=[m.id for m in memories])
    await service.assemblies.remove_members(assembly.id, [memories[0].id, memories[3].id])
    incremental = await service.assemblies.get(assembly.id)
    recomputed = await service.assemblies.recompute(assembly.id)
    assert recomputed.member_count == incremental.member_count == 6
    assert np.allclose(recomputed.centroid or [], incremental.centroid or [], atol=1e-6)
    emptied = await service.assemblies.remove_members(assembly.id, [m.id for m in memories])
    assert (await service.assemblies.recompute(emptied.id)).centroid is None


async def test_embeddings_changed_hook_refreshes_the_centroid(
    service: MemoryService, scope: Scope
) -> None:
    memories = await add_memories(service, scope, 3)
    assembly = await service.assemblies.create(scope, "g", memory_ids=[m.id for m in memories])
    moved = unit(np.random.default_rng(99))
    async with service.pool.acquire() as conn, conn.transaction():
        # What the memory repository is to do when it changes an embedding.
        await service.memories.update(memories[0].id, embedding=moved, conn=conn)
        await service.assemblies.embeddings_changed(conn, [scope.tenant], [memories[0].id])
    await assert_exact(service, assembly.id)


# ------------------------------------------------------------------ search


async def test_search_returns_the_nearest_assembly_first_within_scope(
    service: MemoryService, scope: Scope
) -> None:
    rng = np.random.default_rng(7)
    axes = [unit(rng) for _ in range(3)]
    groups = []
    for g, axis in enumerate(axes):
        items = [
            {"content": f"group {g} item {i}", "embedding": axis + 0.05 * unit(rng)}
            for i in range(4)
        ]
        memories = await service.memories.add_many(scope, items)
        groups.append(
            await service.assemblies.create(scope, f"g{g}", memory_ids=[m.id for m in memories])
        )
    # An assembly in a sibling session, nearest of all to axis 1, must stay out of sight.
    sibling = scope.with_session("sibling")
    twin = await service.memories.add(sibling, "twin", embedding=axes[1])
    hidden = await service.assemblies.create(sibling, "twin", memory_ids=[twin.id])
    await service.assemblies.create(scope, "empty")  # no centroid: never a hit

    for plan in ("auto", "exact", "index"):
        hits = await service.assemblies.search(scope, axes[1], k=10, plan=plan)
        assert [h.assembly.id for h in hits][:1] == [groups[1].id]
        assert len(hits) == 3
        assert hidden.id not in {h.assembly.id for h in hits}
        assert hits[0].score > 0.9 and hits[0].score >= hits[1].score >= hits[2].score
    # Wider scopes see it.
    project = Scope(scope.tenant, scope.project)
    hits = await service.assemblies.search(project, axes[1], k=2, include="descendants")
    assert {h.assembly.id for h in hits} == {hidden.id, groups[1].id}
    assert await service.assemblies.search(Scope("other-tenant"), axes[1]) == []


async def test_search_takes_text_when_the_service_has_an_embedder(
    service: MemoryService, memsvc_settings: Settings, scope: Scope
) -> None:
    units = await service.memories.add_many(
        scope, ["the user prefers metric units", "loads are in kilonewtons"]
    )
    other = await service.memories.add_many(scope, ["deploys happen on Tuesdays"])
    wanted = await service.assemblies.create(scope, "units", memory_ids=[m.id for m in units])
    await service.assemblies.create(scope, "deploys", memory_ids=[m.id for m in other])

    by_text = await service.assemblies.search(scope, "metric units", k=2)
    assert by_text[0].assembly.id == wanted.id
    # The same hits as searching with the embedder's own embedding of the text.
    assert service.embedder is not None
    (vector,) = await service.embedder(["metric units"])
    by_vector = await service.assemblies.search(scope, vector, k=2)
    assert [(h.assembly.id, h.score) for h in by_text] == [
        (h.assembly.id, pytest.approx(h.score)) for h in by_vector
    ]
    for blank in ("", "   "):
        with pytest.raises(ValidationError) as caught:
            await service.assemblies.search(scope, blank)
        assert caught.value.field == "query"

    async with MemoryService.open(memsvc_settings) as plain:  # no embedder
        with pytest.raises(ValidationError) as caught:
            await plain.assemblies.search(scope, "metric units")
        assert caught.value.field == "query" and "embedder" in caught.value.reason


# ------------------------------------------------------------------ concurrency


async def bounded(coro: Any) -> Any:
    return await asyncio.wait_for(coro, OP_TIMEOUT_S)


async def deadlocks(service: MemoryService, previous: int | None = None) -> int:
    """PostgreSQL's count of deadlocks detected in this database.

    Retries would hide a deadlock from the caller, so the tests ask the server.
    Backends publish their statistics within a second of going idle: when
    ``previous`` is given, wait up to 1.5 s for the count to move past it.
    """
    sql = "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + (1.5 if previous is not None else 0.0)
    while True:
        async with service.pool.acquire() as conn:
            count: int = await conn.fetchval(sql)
        if previous is None or count != previous or loop.time() > deadline:
            return count
        await asyncio.sleep(0.25)


async def test_20_concurrent_adders_and_removers_keep_count_and_centroid_exact(
    service: MemoryService, scope: Scope
) -> None:
    memories = await add_memories(service, scope, 30)
    ids = [m.id for m in memories]
    assembly = await service.assemblies.create(scope, "g", memory_ids=ids[:10])
    before = await deadlocks(service)

    async def worker(w: int) -> None:
        rng = random.Random(w)
        for _ in range(8):
            chosen = rng.sample(ids, rng.randint(1, 6))  # overlapping across workers
            if rng.random() < 0.55:
                await bounded(service.assemblies.add_members(assembly.id, chosen))
            else:
                await bounded(service.assemblies.remove_members(assembly.id, chosen))

    await asyncio.gather(*(worker(w) for w in range(20)))
    assert await deadlocks(service, before) == before
    count = await assert_exact(service, assembly.id)
    assert (await service.assemblies.get(assembly.id)).member_count == count


async def test_concurrent_member_deletes_keep_count_and_centroid_exact(
    service: MemoryService, scope: Scope
) -> None:
    memories = await add_memories(service, scope, 40)
    ids = [m.id for m in memories]
    assembly = await service.assemblies.create(scope, "g", memory_ids=ids[:20])
    doomed = ids[::3]
    before = await deadlocks(service)

    async def adder(w: int) -> None:
        rng = random.Random(100 + w)
        for _ in range(10):
            try:
                await bounded(service.assemblies.add_members(assembly.id, rng.sample(ids, 3)))
            except ValidationError:
                pass  # one of them was deleted meanwhile: refused as a whole

    async def remover(w: int) -> None:
        rng = random.Random(200 + w)
        for _ in range(10):
            await bounded(service.assemblies.remove_members(assembly.id, rng.sample(ids, 3)))

    async def deleter() -> None:
        for memory_id in doomed:
            await bounded(service.memories.delete(memory_id))

    await asyncio.gather(
        *(adder(w) for w in range(6)), *(remover(w) for w in range(4)), deleter(), deleter()
    )
    assert await deadlocks(service, before) == before
    await assert_exact(service, assembly.id)
    members = await service.assemblies.members(assembly.id, limit=100)
    assert not {m.id for m in members} & set(doomed)


@pytest.mark.slow
async def test_mixed_adds_removes_and_deletes_never_deadlock(
    service: MemoryService, scope: Scope
) -> None:
    memories = await add_memories(service, scope, 60)
    live = [m.id for m in memories]
    assemblies = [
        (await service.assemblies.create(scope, f"g{i}", memory_ids=live[i::3])).id
        for i in range(3)
    ]
    escaped: list[BaseException] = []
    counts = {"add": 0, "remove": 0, "delete": 0, "refused": 0}
    before = await deadlocks(service)

    async def worker(w: int) -> None:
        rng = random.Random(w)
        for _ in range(40):
            op = rng.random()
            target = rng.choice(assemblies)
            chosen = rng.sample(live, min(len(live), rng.randint(1, 8)))
            try:
                if op < 0.45:
                    await bounded(service.assemblies.add_members(target, chosen))
                    counts["add"] += 1
                elif op < 0.85:
                    await bounded(service.assemblies.remove_members(target, chosen))
                    counts["remove"] += 1
                else:
                    await bounded(service.memories.delete(chosen[0]))
                    counts["delete"] += 1
            except ValidationError:
                counts["refused"] += 1  # a chosen memory was deleted meanwhile
            except (ConcurrencyError, TimeoutError) as exc:  # must never happen
                escaped.append(exc)

    await asyncio.gather(*(worker(w) for w in range(8)))
    assert await deadlocks(service, before) == before, "lock order violated somewhere"
    assert escaped == []
    assert counts["add"] and counts["remove"] and counts["delete"]
    for assembly_id in assemblies:
        await assert_exact(service, assembly_id)


async def test_membership_changes_compose_with_a_callers_transaction(
    service: MemoryService, scope: Scope
) -> None:
    memories = await add_memories(service, scope, 3)
    assembly = await service.assemblies.create(scope, "g")
    async with service.pool.acquire() as conn:
        transaction = conn.transaction()
        await transaction.start()
        await service.assemblies.add_members(assembly.id, [m.id for m in memories], conn=conn)
        await service.assemblies.remove_members(assembly.id, [memories[0].id], conn=conn)
        await transaction.rollback()
    assert (await service.assemblies.get(assembly.id)).member_count == 0
    await assert_exact(service, assembly.id)



async def test_changing_a_members_embedding_moves_the_centroid(service: MemoryService) -> None:
    scope = Scope("t-centroid", "p")
    rng = np.random.default_rng(3)
    a, b, c = (rng.normal(size=384).astype(np.float32) for _ in range(3))
    first = await service.memories.add(scope, "first", embedding=a)
    keyed = await service.memories.put(scope, "k", "keyed", embedding=b)
    group = await service.assemblies.create(scope, "pair", memory_ids=[first.id, keyed.id])
    assert np.allclose(group.centroid, (a + b) / 2, atol=1e-4)
    await service.memories.update(first.id, embedding=c)
    assert np.allclose((await service.assemblies.get(group.id)).centroid, (c + b) / 2, atol=1e-4)
    await service.memories.put(scope, "k", "keyed again", embedding=a)
    assert np.allclose((await service.assemblies.get(group.id)).centroid, (c + a) / 2, atol=1e-4)
