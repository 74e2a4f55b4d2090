"""Storing, reading, changing and deleting memories."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from datetime import UTC, datetime

import numpy as np
import pytest

from memsvc import ConflictError, MemoryService, NotFoundError, Scope, ValidationError
from memsvc.core.models import Memory


async def test_add_returns_the_stored_memory(service: MemoryService, scope: Scope) -> None:
    memory = await service.memories.add(
        scope, "the user prefers metric units", metadata={"kind": "preference"}, importance=0.8
    )
    assert memory.scope == scope
    assert memory.content == "the user prefers metric units"
    assert memory.content_hash.startswith("sha256:") and len(memory.content_hash) == 71
    assert memory.metadata == {"kind": "preference"}
    assert memory.importance == pytest.approx(0.8)
    assert memory.version == 1
    assert memory.embedding is not None and len(memory.embedding) == 384
    assert await service.memories.get(memory.id) == memory


async def test_identical_content_in_a_scope_is_stored_once(
    service: MemoryService, scope: Scope
) -> None:
    first = await service.memories.add(scope, "same words")
    second = await service.memories.add(scope, "same words", metadata={"other": True})
    assert second.id == first.id
    assert await service.memories.count(scope) == 1
    elsewhere = await service.memories.add(scope.with_session("s-43"), "same words")
    assert elsewhere.id != first.id


async def test_client_id_makes_a_retried_add_idempotent(
    service: MemoryService, scope: Scope
) -> None:
    memory_id = uuid.uuid4()
    first = await service.memories.add(scope, "retry me", id=memory_id)
    again = await service.memories.add(scope, "retry me", id=memory_id)
    assert first.id == again.id == memory_id
    assert await service.memories.count(scope) == 1
    with pytest.raises(ConflictError):
        await service.memories.add(scope, "different content, same id", id=memory_id)
    assert await service.memories.count(scope) == 1


async def test_put_replaces_the_keyed_memory_and_keeps_history(
    service: MemoryService, scope: Scope
) -> None:
    first = await service.memories.put(scope, "units", "metric")
    second = await service.memories.put(scope, "units", "imperial")
    assert second.id == first.id
    assert second.version == 2
    assert (await service.memories.get_by_key(scope, "units")).content == "imperial"
    events = await service.memories.history(first.id)
    assert [(e.kind, e.version) for e in events] == [("created", 1), ("updated", 2)]
    assert events[1].prior is not None and events[1].prior["content"] == "metric"
    # Two keys may hold the same value: keyed memories are not deduplicated.
    other = await service.memories.put(scope, "length", "imperial")
    assert other.id != first.id
    with pytest.raises(NotFoundError):
        await service.memories.get_by_key(scope, "missing")


async def test_update_checks_the_expected_version(service: MemoryService, scope: Scope) -> None:
    memory = await service.memories.add(scope, "draft")
    updated = await service.memories.update(
        memory.id, content="final", importance=0.9, expected_version=1
    )
    assert (updated.content, updated.version) == ("final", 2)
    assert updated.content_hash != memory.content_hash
    assert updated.embedding != memory.embedding  # re-embedded by the service's embedder
    with pytest.raises(ConflictError):
        await service.memories.update(memory.id, content="stale", expected_version=1)
    assert (await service.memories.get(memory.id)).content == "final"
    with pytest.raises(NotFoundError):
        await service.memories.update(uuid.uuid4(), content="nobody")


async def test_patch_metadata_merges_top_level_keys(service: MemoryService, scope: Scope) -> None:
    memory = await service.memories.add(scope, "note", metadata={"a": 1, "b": {"x": 1}})
    patched = await service.memories.patch_metadata(memory.id, {"b": {"y": 2}, "c": 3})
    assert patched.metadata == {"a": 1, "b": {"y": 2}, "c": 3}
    assert patched.version == 2


async def test_patch_metadata_refuses_to_grow_past_the_limit(
    service: MemoryService, scope: Scope
) -> None:
    limit = service.settings.max_metadata_bytes
    memory = await service.memories.add(scope, "note", metadata={"a": "x" * (limit - 100)})
    with pytest.raises(ValidationError) as raised:
        await service.memories.patch_metadata(memory.id, {"b": "y" * 200})
    assert raised.value.field == "patch"
    assert (await service.memories.get(memory.id)).version == 1


async def test_delete_removes_and_records_the_event(service: MemoryService, scope: Scope) -> None:
    memory = await service.memories.add(scope, "forget me")
    assert await service.memories.delete(memory.id) is True
    assert await service.memories.delete(memory.id) is False
    with pytest.raises(NotFoundError):
        await service.memories.get(memory.id)
    kinds = [e.kind for e in await service.memories.history(memory.id)]
    assert kinds == ["created", "deleted"]


async def test_delete_scope_removes_everything_below_it(service: MemoryService) -> None:
    agent = Scope("t1", "p", "a")
    await service.memories.add_many(agent.with_session("s1"), [f"m{i}" for i in range(250)])
    await service.memories.add_many(agent, [f"a{i}" for i in range(30)])
    keep = await service.memories.add(Scope("t1", "p", "other"), "stays")
    deleted = await service.memories.delete_scope(agent, batch_size=100)
    assert deleted == 280
    assert await service.memories.count(Scope("t1"), include="descendants") == 1
    assert await service.memories.get(keep.id)


async def test_list_pages_by_keyset_in_creation_order(service: MemoryService, scope: Scope) -> None:
    added = [await service.memories.add(scope, f"memory {i}") for i in range(25)]
    seen = []
    after = None
    while True:
        page = await service.memories.list(scope, limit=10, after=after)
        if not page:
            break
        seen.extend(page)
        after = page[-1].id
    assert [m.id for m in seen] == [m.id for m in added]


async def test_get_many_returns_found_ones_in_order(service: MemoryService, scope: Scope) -> None:
    a = await service.memories.add(scope, "a")
    b = await service.memories.add(scope, "b")
    got = await service.memories.get_many([b.id, uuid.uuid4(), str(a.id)])
    assert [m.id for m in got] == [b.id, a.id]


async def test_track_access_counts_reads(service: MemoryService, scope: Scope) -> None:
    memory = await service.memories.add(scope, "popular")
    await service.memories.get(memory.id, track_access=True)
    again = await service.memories.get(memory.id, track_access=True)
    assert again.access_count == 2 and again.last_accessed_at is not None


async def test_get_of_an_id_in_two_tenants_needs_the_tenant(
    service: MemoryService, scope: Scope
) -> None:
    # get selects one id with a plain equality: it must still see every
    # tenant's row, and a tenant= (with or without track_access) only its own;
    # a get that fails writes nothing.
    shared = uuid.uuid4()
    await service.memories.add(scope, "acme's", id=shared)
    await service.memories.add(Scope("other", "p"), "other's", id=shared)
    with pytest.raises(ConflictError):
        await service.memories.get(shared)
    with pytest.raises(ConflictError):
        await service.memories.get(str(shared), track_access=True)
    other = await service.memories.get(shared, tenant="other", track_access=True)
    assert other.content == "other's" and other.access_count == 1
    mine = await service.memories.get(str(shared), tenant=scope.tenant)
    # 0: the failed track_access get above counted nothing.
    assert mine.content == "acme's" and mine.access_count == 0
    with pytest.raises(NotFoundError):
        await service.memories.get(shared, tenant="nobody")


async def test_expired_memories_are_invisible(service: MemoryService, scope: Scope) -> None:
    memory = await service.memories.add(scope, "short-lived", ttl=60)
    assert memory.expires_at is not None
    async with service.pool.acquire() as conn:
        await conn.execute(
            "UPDATE memsvc.memories SET expires_at = now() - interval '1 second' WHERE id = $1",
            memory.id,
        )
    with pytest.raises(NotFoundError):
        await service.memories.get(memory.id)
    assert await service.memories.count(scope) == 0
    assert await service.memories.list(scope) == []
    assert await service.memories.search(scope, "short-lived", k=5) == []


async def test_add_many_is_all_or_nothing(service: MemoryService, scope: Scope) -> None:
    items = [{"content": f"ok {i}"} for i in range(10)]
    items.append({"content": "bad", "embedding": [0.0] * 3})
    with pytest.raises(ValidationError) as raised:
        await service.memories.add_many(scope, items)
    assert raised.value.field == "items[10].embedding"
    assert await service.memories.count(scope) == 0


async def test_add_many_deduplicates_within_and_across_batches(
    service: MemoryService, scope: Scope
) -> None:
    existing = await service.memories.add(scope, "x")
    result = await service.memories.add_many(scope, ["x", "y", "y", {"content": "z"}])
    assert [m.content for m in result] == ["x", "y", "y", "z"]
    assert result[0].id == existing.id and result[1].id == result[2].id
    assert await service.memories.count(scope) == 3


async def test_caller_owned_transaction_rolls_back_with_the_app(
    service: MemoryService, scope: Scope
) -> None:
    async with service.pool.acquire() as conn:
        transaction = conn.transaction()
        await transaction.start()
        await service.memories.add(scope, "inside the app's transaction", conn=conn)
        await conn.execute("SELECT 1")  # the app's own work would go here
        await transaction.rollback()
    assert await service.memories.count(scope) == 0


async def test_large_unicode_and_deep_values_round_trip(
    service: MemoryService, scope: Scope
) -> None:
    for size in (1024 * 1024, 5 * 1024 * 1024):
        content = ("ünïcödé ✓ 🧠 " * (size // 20))[:size]
        memory = await service.memories.add(scope, content, embedding=np.ones(384))
        assert (await service.memories.get(memory.id)).content == content
    nested: dict[str, object] = {"leaf": '🌍 "quoted" \\ back\nslash'}
    for level in range(100):
        nested = {f"level{level}": nested}
    memory = await service.memories.add(scope, "deep", metadata=nested)
    assert (await service.memories.get(memory.id)).metadata == nested


async def test_get_returns_exactly_the_memory_as_stored(
    service: MemoryService, scope: Scope
) -> None:
    metadata = {
        "int": 3, "float": 1.5, "whole float": 2.0, "big float": 1e20, "bool": True,
        "null": None, "text": "0.1", "nested": [1, 2.5, {"deep": False}],
    }
    vector = np.random.default_rng(3).normal(size=384)
    added = await service.memories.add(
        scope, "read back as written", embedding=vector, metadata=metadata, importance=0.3,
        ttl=3600,
    )
    keyed = await service.memories.put(scope, "k", "keyed", importance=0.7)
    for stored in (added, keyed):
        got = await service.memories.get(stored.id)
        assert got == stored
        assert await service.memories.get(str(stored.id), tenant=scope.tenant) == stored
        assert await service.memories.get_many([stored.id]) == [stored]
        assert type(got) is Memory and type(got.scope) is Scope and got.scope == scope
        assert got.created_at.utcoffset() is not None
        assert got.updated_at.utcoffset() is not None
    got = await service.memories.get(added.id)
    assert got.key is None and keyed.key == "k"
    assert got.expires_at is not None and got.expires_at.utcoffset() is not None
    # Numbers keep their JSON types; importance reads back as written.
    assert got.metadata == metadata
    assert {k: type(v) for k, v in got.metadata.items()} == {
        k: type(v) for k, v in metadata.items()
    }
    assert got.importance == 0.3
    assert type(got.embedding) is list and all(type(x) is float for x in got.embedding)
    assert got.embedding == np.asarray(vector, dtype=np.float32).tolist()
    touched = await service.memories.get(added.id, track_access=True)
    assert touched.access_count == 1 and touched.last_accessed_at is not None
    assert touched.last_accessed_at.utcoffset() is not None
    assert touched == dataclasses.replace(
        added, access_count=1, last_accessed_at=touched.last_accessed_at
    )


async def test_get_refuses_a_bad_tenant_every_time(service: MemoryService, scope: Scope) -> None:
    memory = await service.memories.add(scope, "tenant checked")
    for tenant in ("bad\x00tenant", "bad\x00tenant", "", 5):
        with pytest.raises(ValidationError) as caught:
            await service.memories.get(memory.id, tenant=tenant)  # type: ignore[arg-type]
        assert caught.value.field == "scope.tenant"
    assert await service.memories.get(memory.id, tenant=scope.tenant) == memory
    with pytest.raises(NotFoundError):
        await service.memories.get(memory.id, tenant="someone-else")


# ---------------------------------------------------------------- expired copies
#
# An expired memory waits only for gc; reads never return it. Deduplication
# counts it as gone: an add of its content (or id) removes it and stores a
# new memory, so add never returns a memory a read could not return.


async def _expire(service: MemoryService, *ids: uuid.UUID) -> None:
    async with service.pool.acquire() as conn:
        await conn.execute(
            "UPDATE memsvc.memories SET expires_at = now() - interval '1 second' "
            "WHERE id = ANY($1::uuid[])",
            list(ids),
        )


async def _assert_readable(service: MemoryService, scope: Scope, memory: Memory) -> None:
    assert memory.expires_at is None
    assert await service.memories.get(memory.id) == memory
    assert [m.id for m in await service.memories.list(scope)] == [memory.id]
    hits = await service.memories.search(scope, memory.content, mode="text")
    assert [h.memory.id for h in hits] == [memory.id]


@pytest.mark.parametrize("how", ["embedded here", "embedding given", "caller's transaction"])
async def test_adding_the_content_of_an_expired_memory_stores_a_new_one(
    service: MemoryService, scope: Scope, how: str
) -> None:
    old = await service.memories.add(scope, "the meeting moved to 3pm", ttl=60)
    await _expire(service, old.id)
    arguments: dict = {"embedding": np.ones(384)} if how == "embedding given" else {}
    if how == "caller's transaction":
        async with service.pool.acquire() as conn, conn.transaction():
            new = await service.memories.add(scope, "the meeting moved to 3pm", conn=conn)
    else:
        new = await service.memories.add(scope, "the meeting moved to 3pm", **arguments)
    assert new.id != old.id and new.version == 1 and new.created_at > old.created_at
    await _assert_readable(service, scope, new)
    with pytest.raises(NotFoundError):
        await service.memories.get(old.id)
    # The expired row went as gc would have removed it: with its deleted event.
    assert [e.kind for e in await service.memories.history(old.id)] == ["created", "deleted"]


async def test_an_expired_memory_s_id_can_be_added_again(
    service: MemoryService, scope: Scope
) -> None:
    old = await service.memories.add(scope, "retry me later", ttl=60)
    await _expire(service, old.id)
    again = await service.memories.add(scope, "different words, same id", id=old.id)
    assert again.id == old.id and again.content == "different words, same id"
    await _assert_readable(service, scope, again)


async def test_add_many_with_the_content_of_an_expired_memory_stores_a_new_one(
    service: MemoryService, scope: Scope
) -> None:
    old = await service.memories.add(scope, "stale", ttl=60)
    kept = await service.memories.add(scope, "kept")
    await _expire(service, old.id)
    result = await service.memories.add_many(scope, ["kept", "stale", "stale", "fresh"])
    assert [m.content for m in result] == ["kept", "stale", "stale", "fresh"]
    assert result[0].id == kept.id
    assert result[1].id == result[2].id != old.id and result[1].expires_at is None
    assert await service.memories.get(result[1].id) == result[1]
    assert await service.memories.count(scope) == 3
    with pytest.raises(NotFoundError):
        await service.memories.get(old.id)


async def test_racing_adds_across_the_expiry_instant_agree_on_one_live_memory(
    service: MemoryService, scope: Scope
) -> None:
    content = "a fact that expires while agents race to re-add it"
    old = await service.memories.add(scope, content, ttl=2.0)
    assert old.expires_at is not None

    async def add_at(delay: float, many: bool) -> tuple[datetime, Memory]:
        await asyncio.sleep(delay)
        started = datetime.now(UTC)
        if many:
            return started, (await service.memories.add_many(scope, [content]))[0]
        return started, await service.memories.add(scope, content)

    # Forty adds and batches spread over 4 s: the old copy expires after 2 s
    # (wide margins: a loaded machine, or a cluster's extra hop, delays each).
    results = await asyncio.gather(
        *(add_at(0.1 * i, many=i % 3 == 0) for i in range(40))
    )
    new_ids = set()
    for started, memory in results:
        if memory.id == old.id:
            # Returned only while it was live: a read at that moment saw it too.
            assert memory.expires_at is not None and memory.expires_at > started
        else:
            assert memory.expires_at is None
            new_ids.add(memory.id)
    assert any(memory.id == old.id for _, memory in results)  # the race did span it
    assert len(new_ids) == 1  # every add after the expiry got the same new memory
    (new_id,) = new_ids
    assert [m.id for m in await service.memories.list(scope)] == [new_id]
    async with service.pool.acquire() as conn:
        rows = await conn.fetchval("SELECT count(*) FROM memsvc.memories")
    assert rows == 1  # the expired copy was removed, not left beside the new one
