"""Forgetting: half-life policies, strength, forget passes, restore, gc (real PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
import math
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from memsvc import (
    MemoryService,
    NotFoundError,
    Policy,
    Scope,
    Settings,
    ValidationError,
)
from memsvc.core.models import Memory
from memsvc.memories.strength import memory_strength
from tests.test_row_level_security import rls_database  # noqa: F401 (a fixture)

DAY = timedelta(days=1)
TENANT = Scope("acme")
PROJECT = Scope("acme", "bridge")


async def backdate(service: MemoryService, memory: Memory, by: timedelta) -> None:
    """Make a memory older than it is, as a store a month old would hold it."""
    async with service.pool.acquire() as conn:
        await conn.execute(
            "UPDATE memsvc.memories SET created_at = created_at - $2::interval WHERE id = $1",
            memory.id,
            by,
        )


async def visible(service: MemoryService, scope: Scope) -> set[uuid.UUID]:
    """The ids search, list and count see in ``scope`` (and below); count agrees."""
    listed = {m.id for m in await service.memories.list(scope, include="descendants")}
    hits = await service.memories.search(scope, "memory", k=100, include="descendants")
    assert {h.memory.id for h in hits} <= listed
    assert await service.memories.count(scope, include="descendants") == len(listed)
    return listed


# ----------------------------------------------------------------- strength


def test_strength_halves_every_half_life_from_the_last_renewal() -> None:
    created = datetime(2026, 1, 1, tzinfo=UTC)
    memory = Memory(
        id=uuid.uuid4(), scope=TENANT, content="x", content_hash="sha256:0", metadata={},
        embedding=None, importance=0.8, version=1, created_at=created, updated_at=created,
    )  # fmt: skip
    assert memory_strength(memory, created + 10 * DAY, 10 * 86_400) == pytest.approx(0.4)
    assert memory_strength(memory, created + 30 * DAY, 10 * 86_400) == pytest.approx(0.1)
    assert memory_strength(memory, created - DAY, 10 * 86_400) == pytest.approx(0.8)
    accessed = Memory(**{**memory.__dict__, "last_accessed_at": created + 20 * DAY})
    assert memory_strength(accessed, created + 30 * DAY, 10 * 86_400) == pytest.approx(0.4)


# ----------------------------------------------------------------- policies


async def test_policies_set_get_list_delete(service: MemoryService) -> None:
    tenant = await service.policies.set(TENANT, half_life=30 * 86_400)
    assert isinstance(tenant, Policy)
    assert tenant.half_life == 30 * DAY and tenant.scope == TENANT
    await service.policies.set(PROJECT, half_life=timedelta(days=7))
    again = await service.policies.set(PROJECT, half_life=timedelta(days=3))
    assert again.half_life == 3 * DAY
    assert (await service.policies.get(PROJECT)).half_life == 3 * DAY
    await service.policies.set(Scope("other"), half_life=60)
    assert [p.scope for p in await service.policies.list()] == [TENANT, PROJECT, Scope("other")]
    assert [p.scope for p in await service.policies.list(tenant="acme")] == [TENANT, PROJECT]
    assert await service.policies.delete(PROJECT) is True
    assert await service.policies.delete(PROJECT) is False
    with pytest.raises(NotFoundError):
        await service.policies.get(PROJECT)


@pytest.mark.parametrize("bad", [0, -1, math.nan, True, "30d", timedelta(0)])
async def test_a_bad_half_life_is_refused_naming_it(service: MemoryService, bad: object) -> None:
    with pytest.raises(ValidationError) as caught:
        await service.policies.set(TENANT, half_life=bad)  # type: ignore[arg-type]
    assert caught.value.field == "half_life"
    assert await service.policies.list() == []


# ----------------------------------------------------------------- forgetting


async def test_weak_memories_leave_every_read_at_once(service: MemoryService) -> None:
    scope = Scope("acme", "bridge", "planner")
    await service.policies.set(TENANT, half_life=10 * DAY)
    weak = await service.memories.add(scope, "a weak memory", importance=0.2)
    strong = await service.memories.add(scope, "a strong memory", importance=0.5)
    later = weak.created_at + 30 * DAY  # weak: 0.025, strong: 0.0625

    preview = await service.maintenance.forget(TENANT, dry_run=True, now=later)
    assert preview.ids == [weak.id] and preview.dry_run
    assert await visible(service, TENANT) == {weak.id, strong.id}

    report = await service.maintenance.forget(TENANT, now=later)
    assert report.ids == [weak.id] and report.forgotten == 1
    assert await visible(service, TENANT) == {strong.id}
    # get by id still finds it, saying since when it is forgotten.
    got = await service.memories.get(weak.id)
    # Recorded at the real time of the pass, not at `later`.
    assert got.forgotten_at is not None and got.forgotten_at < later
    assert got.version == weak.version + 1
    history = await service.memories.history(weak.id)
    assert [e.kind for e in history] == ["created", "updated"]
    # A second pass finds nothing more to forget.
    assert (await service.maintenance.forget(TENANT, now=later)).forgotten == 0


async def test_keyed_pinned_and_assembly_members_are_never_forgotten_unless_asked(
    service: MemoryService,
) -> None:
    await service.policies.set(TENANT, half_life=DAY)
    plain = await service.memories.add(PROJECT, "plain memory", importance=0.1)
    keyed = await service.memories.put(PROJECT, "status", "keyed memory", importance=0.1)
    pinned = await service.memories.add(PROJECT, "pinned memory", importance=0.1, pinned=True)
    member = await service.memories.add(PROJECT, "member memory", importance=0.1)
    await service.assemblies.create(PROJECT, "group", memory_ids=[member.id])
    later = plain.created_at + 30 * DAY

    report = await service.maintenance.forget(now=later)
    assert report.ids == [plain.id]
    assert pinned.pinned and (await service.memories.get(pinned.id)).pinned
    group = await service.assemblies.get_by_name(PROJECT, "group")
    assert [m.id for m in await service.assemblies.members(group.id)] == [member.id]
    report = await service.maintenance.forget(now=later, assembly_members=True)
    assert report.ids == [member.id]
    assert await service.assemblies.members(group.id) == []  # out of member pages too
    assert await visible(service, PROJECT) == {keyed.id, pinned.id}
    await service.memories.update(pinned.id, pinned=False)
    assert (await service.maintenance.forget(now=later)).ids == [pinned.id]
    assert await visible(service, PROJECT) == {keyed.id}


async def test_the_most_specific_policy_applies_and_no_policy_never_forgets(
    service: MemoryService,
) -> None:
    await service.policies.set(TENANT, half_life=DAY)
    await service.policies.set(PROJECT, half_life=1000 * DAY)
    await service.policies.set(Scope("acme", None, None, "s-1"), half_life=1000 * DAY)
    in_project = await service.memories.add(Scope("acme", "bridge", "a", "s"), "m1")
    elsewhere = await service.memories.add(Scope("acme", "deck"), "m2")
    # (acme, s-1) is not on the path of (acme, deck, -, s-1): the tenant's applies.
    sibling = await service.memories.add(Scope("acme", "deck", None, "s-1"), "m3")
    session = await service.memories.add(Scope("acme", None, None, "s-1"), "m4")
    unruled = await service.memories.add(Scope("nobody"), "m5", importance=0.0)
    later = in_project.created_at + 30 * DAY

    report = await service.maintenance.forget(now=later)
    assert set(report.ids) == {elsewhere.id, sibling.id}
    assert await visible(service, TENANT) == {in_project.id, session.id}
    assert await visible(service, Scope("nobody")) == {unruled.id}


async def test_a_tracked_access_renews_a_memory_and_a_plain_read_does_not(
    service: MemoryService,
) -> None:
    await service.policies.set(TENANT, half_life=DAY)
    used = await service.memories.add(PROJECT, "used memory", importance=0.5)
    read = await service.memories.add(PROJECT, "read memory", importance=0.5)
    for memory in (used, read):
        await backdate(service, memory, 30 * DAY)
    await service.memories.get(used.id, track_access=True)
    await service.memories.get(read.id)
    await service.memories.search(PROJECT, "read memory", k=5)

    assert (await service.maintenance.forget()).ids == [read.id]
    assert await visible(service, PROJECT) == {used.id}


async def test_restore_brings_a_memory_back_within_the_grace_period(
    service: MemoryService, settings: Settings
) -> None:
    await service.policies.set(TENANT, half_life=DAY)
    recent = await service.memories.add(PROJECT, "recently forgotten", importance=0.01)
    old = await service.memories.add(PROJECT, "forgotten long ago", importance=0.01)
    now = datetime.now(UTC)
    await service.maintenance.forget(PROJECT, now=now)
    grace = timedelta(days=settings.forget_grace_days)
    async with service.pool.acquire() as conn:
        await conn.execute(
            "UPDATE memsvc.memories SET forgotten_at = forgotten_at - $2::interval WHERE id = $1",
            old.id,
            grace + DAY,
        )
    assert await visible(service, PROJECT) == set()

    restored = await service.memories.restore(recent.id)
    assert restored.forgotten_at is None and restored.access_count == 1
    assert restored.last_accessed_at is not None and restored.last_accessed_at >= now
    assert await visible(service, PROJECT) == {recent.id}
    # Not forgotten: returned as it is, nothing written.
    assert (await service.memories.restore(recent.id)).version == restored.version
    events = await service.memories.history(recent.id)
    assert [e.kind for e in events] == ["created", "updated", "updated"]
    assert events[1].prior is not None and events[1].prior["forgotten_at"] is None
    assert events[2].prior is not None and events[2].prior["forgotten_at"] is not None
    with pytest.raises(NotFoundError, match="grace period"):
        await service.memories.restore(old.id)
    with pytest.raises(NotFoundError):
        await service.memories.restore(uuid.uuid4())


async def test_gc_forgets_under_a_policy_and_deletes_past_the_grace_period(
    service: MemoryService, settings: Settings
) -> None:
    weak = await service.memories.add(PROJECT, "weak memory", importance=0.01)
    report = await service.maintenance.gc()
    assert report.memories_forgotten == 0  # no policy: nothing decays
    await service.policies.set(TENANT, half_life=DAY)
    report = await service.maintenance.gc()
    assert report.memories_forgotten == 1 and report.forgotten_deleted == 0
    assert (await service.memories.get(weak.id)).forgotten_at is not None

    grace = timedelta(days=settings.forget_grace_days)
    async with service.pool.acquire() as conn:
        await conn.execute(
            "UPDATE memsvc.memories SET forgotten_at = forgotten_at - $1::interval", grace + DAY
        )
    report = await service.maintenance.gc()
    assert report.forgotten_deleted == 1
    with pytest.raises(NotFoundError):
        await service.memories.get(weak.id)
    # Deleted like delete: the history stays, ending with the deletion.
    assert [e.kind for e in await service.memories.history(weak.id)][-1] == "deleted"


async def age_forgetting(service: MemoryService, settings: Settings) -> None:
    """Move every forgetting back past the grace period, so gc may delete it."""
    grace = timedelta(days=settings.forget_grace_days)
    async with service.pool.acquire() as conn:
        await conn.execute(
            "UPDATE memsvc.memories SET forgotten_at = forgotten_at - $1::interval "
            "WHERE forgotten_at IS NOT NULL",
            grace + DAY,
        )


async def test_pinning_a_forgotten_memory_restores_it_and_gc_keeps_it(
    service: MemoryService, settings: Settings
) -> None:
    await service.policies.set(TENANT, half_life=DAY)
    memory = await service.memories.add(PROJECT, "the user is allergic to nuts", importance=0.0)
    assert (await service.maintenance.forget(PROJECT)).ids == [memory.id]
    pinned = await service.memories.update(memory.id, pinned=True)
    assert pinned.pinned and pinned.forgotten_at is None
    assert await visible(service, PROJECT) == {memory.id}
    # A pinned row still marked forgotten (written by other means) is not deleted either.
    async with service.pool.acquire() as conn:
        await conn.execute(
            "UPDATE memsvc.memories SET forgotten_at = now() WHERE id = $1", memory.id
        )
    await age_forgetting(service, settings)
    assert (await service.maintenance.gc()).forgotten_deleted == 0
    assert (await service.memories.get(memory.id)).pinned


async def test_reading_a_forgotten_memory_does_not_renew_it(
    service: MemoryService, settings: Settings
) -> None:
    await service.policies.set(TENANT, half_life=DAY)
    memory = await service.memories.add(PROJECT, "a weak memory", importance=0.0)
    assert (await service.maintenance.forget(PROJECT)).ids == [memory.id]
    read = await service.memories.get(memory.id, track_access=True)
    assert read.forgotten_at is not None
    assert (read.access_count, read.last_accessed_at) == (0, memory.last_accessed_at)
    await age_forgetting(service, settings)
    assert (await service.maintenance.gc()).forgotten_deleted == 1


async def test_forgetting_at_another_now_records_the_real_time_of_the_pass(
    service: MemoryService, settings: Settings
) -> None:
    await service.policies.set(TENANT, half_life=DAY)
    memory = await service.memories.add(PROJECT, "a weak memory", importance=0.01)
    await backdate(service, memory, 400 * DAY)
    before = datetime.now(UTC)
    # Strength reckoned at a moment past the grace period...
    past = before - timedelta(days=settings.forget_grace_days) - 30 * DAY
    assert (await service.maintenance.forget(PROJECT, now=past)).ids == [memory.id]
    forgotten = await service.memories.get(memory.id)
    assert forgotten.forgotten_at is not None and forgotten.forgotten_at >= before
    # ...but the grace period runs from now: gc keeps it and restore brings it back.
    assert (await service.maintenance.gc()).forgotten_deleted == 0
    assert (await service.memories.restore(memory.id)).forgotten_at is None


async def test_adding_forgotten_content_again_stores_it_anew(service: MemoryService) -> None:
    await service.policies.set(TENANT, half_life=DAY)
    first = await service.memories.add(PROJECT, "said once", importance=0.01)
    await service.maintenance.forget(now=datetime.now(UTC))
    again = await service.memories.add(PROJECT, "said once", importance=0.9)
    assert again.id != first.id and again.forgotten_at is None
    assert await visible(service, PROJECT) == {again.id}
    batch = await service.memories.add_many(PROJECT, [{"content": "said once"}])
    assert [m.id for m in batch] == [again.id]


async def test_bad_forget_arguments_are_refused_naming_them(service: MemoryService) -> None:
    for field, kwargs in (
        ("below", {"below": 2}),
        ("now", {"now": datetime(2026, 1, 1)}),
        ("dry_run", {"dry_run": "yes"}),
        ("assembly_members", {"assembly_members": 1}),
        ("batch_size", {"batch_size": 0}),
    ):
        with pytest.raises(ValidationError) as caught:
            await service.maintenance.forget(**kwargs)  # type: ignore[arg-type]
        assert caught.value.field == field
    with pytest.raises(ValidationError) as caught:
        await service.memories.add(PROJECT, "x", pinned="yes")  # type: ignore[arg-type]
    assert caught.value.field == "pinned"
    with pytest.raises(ValidationError) as caught:
        await service.memories.add_many(PROJECT, [{"content": "x", "pinned": 1}])
    assert caught.value.field == "items[0].pinned"


async def test_rank_recall_follows_the_scopes_half_life(service: MemoryService) -> None:
    fading, lasting = Scope("acme", "fading"), Scope("acme", "lasting")
    await service.policies.set(fading, half_life=DAY)
    await service.policies.set(lasting, half_life=1000 * DAY)
    vector = [1.0] + [0.0] * 383
    a = await service.memories.add(fading, "fading fact", embedding=vector, importance=1.0)
    b = await service.memories.add(lasting, "lasting fact", embedding=vector, importance=0.9)
    for memory in (a, b):
        await backdate(service, memory, 10 * DAY)
    hits = await service.memories.search(TENANT, vector, k=2, include="descendants")
    assert hits[0].memory.id == a.id or hits[0].score == hits[1].score
    recall = await service.memories.search(
        TENANT, vector, k=2, include="descendants", rank="recall"
    )
    assert [h.memory.id for h in recall] == [b.id, a.id]


# ----------------------------------------------------------------- races


async def test_a_pass_never_forgets_a_memory_renewed_while_it_runs(
    service: MemoryService,
) -> None:
    """A tracked access holding the row when the pass reaches it wins: the
    pass skips the row, and the next pass sees it renewed."""
    await service.policies.set(TENANT, half_life=DAY)
    memory = await service.memories.add(PROJECT, "in use", importance=0.5)
    await backdate(service, memory, 30 * DAY)
    async with service.pool.acquire() as conn, conn.transaction():
        await service.memories.get(memory.id, track_access=True, conn=conn)
        report = await service.maintenance.forget()  # runs while the access is open
        assert report.forgotten == 0
    assert (await service.maintenance.forget()).forgotten == 0
    assert (await service.memories.get(memory.id)).forgotten_at is None


async def test_naive_select_then_update_forgets_a_renewed_memory(
    service: MemoryService,
) -> None:
    """The control: choosing the weak rows, then forgetting them by id, loses
    a renewal that commits in between."""
    await service.policies.set(TENANT, half_life=DAY)
    memory = await service.memories.add(PROJECT, "in use", importance=0.5)
    await backdate(service, memory, 30 * DAY)
    async with service.pool.acquire() as conn:
        weak = await conn.fetch(
            "SELECT id FROM memsvc.memories WHERE forgotten_at IS NULL AND importance * "
            "power(0.5, extract(epoch FROM now() - greatest(created_at, last_accessed_at))"
            " / 86400) < 0.05"
        )
        await service.memories.get(memory.id, track_access=True)  # renewed meanwhile
        await conn.execute(
            "UPDATE memsvc.memories SET forgotten_at = now() WHERE id = ANY($1::uuid[])",
            [row["id"] for row in weak],
        )
    renewed = await service.memories.get(memory.id)
    assert renewed.forgotten_at is not None and renewed.last_accessed_at is not None


async def test_racing_forgets_restores_and_accesses_keep_a_consistent_history(
    service: MemoryService,
) -> None:
    """20 tasks: passes, restores and tracked accesses of the same memories at
    once. No update is lost (versions follow each other), forget and restore
    events alternate, and each memory ends as its last event left it."""
    await service.policies.set(TENANT, half_life=DAY)
    memories = [
        await service.memories.add(PROJECT, f"memory {i}", importance=0.01) for i in range(30)
    ]
    ids = [m.id for m in memories]

    async def forgetting() -> None:
        for _ in range(5):
            await service.maintenance.forget(PROJECT, batch_size=7)

    async def restoring(offset: int) -> None:
        for memory_id in ids[offset::3]:
            await service.memories.restore(memory_id)

    async def accessing(offset: int) -> None:
        for memory_id in ids[offset::5]:
            await service.memories.get(memory_id, track_access=True)

    tasks = [forgetting() for _ in range(8)]
    tasks += [restoring(i % 3) for i in range(8)]
    tasks += [accessing(i) for i in range(4)]
    await asyncio.gather(*tasks)

    async with service.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT memory_id, kind, version, prior FROM memsvc.memory_events "
            "WHERE memory_id = ANY($1::uuid[]) ORDER BY memory_id, event_id",
            ids,
        )
    by_memory: dict[uuid.UUID, list[asyncpg.Record]] = {}
    for row in rows:
        by_memory.setdefault(row["memory_id"], []).append(row)
    for memory_id in ids:
        events = by_memory[memory_id]
        assert [e["version"] for e in events] == list(range(1, len(events) + 1))
        changes = [e["prior"] for e in events[1:]]
        forgotten = False
        for prior in changes:
            values = json.loads(prior) if isinstance(prior, str) else prior
            was = values["forgotten_at"] is not None
            assert was == forgotten  # a forget follows a restore, and the other way round
            forgotten = not forgotten
        current = await service.memories.get(memory_id)
        assert (current.forgotten_at is not None) == forgotten


async def test_under_row_level_security_tenants_keep_their_policies_and_memories(
    rls_database: tuple[str, str],  # noqa: F811
) -> None:
    _, runtime_dsn = rls_database
    async with MemoryService.open(Settings(database_url=runtime_dsn, row_level_security=True,
                                           auto_migrate=False, pool_max_size=4)) as svc:
        await svc.policies.set(Scope("a"), half_life=DAY)
        await svc.policies.set(Scope("b"), half_life=1000 * DAY)
        a = await svc.memories.add(Scope("a"), "memory of a", importance=0.1)
        b = await svc.memories.add(Scope("b"), "memory of b", importance=0.1)
        later = a.created_at + 30 * DAY
        assert [p.scope for p in await svc.policies.list(tenant="a")] == [Scope("a")]
        with pytest.raises(ValidationError) as caught:
            await svc.policies.list()
        assert caught.value.field == "tenant"
        with pytest.raises(ValidationError):
            await svc.maintenance.forget(now=later)  # every tenant: not for this role
        assert (await svc.maintenance.forget(Scope("b"), now=later)).forgotten == 0
        assert (await svc.maintenance.forget(Scope("a"), now=later)).ids == [a.id]
        assert await svc.memories.count(Scope("a")) == 0
        assert await svc.memories.count(Scope("b")) == 1
        with pytest.raises(NotFoundError):
            await svc.memories.restore(a.id, tenant="b")
        assert (await svc.memories.restore(a.id, tenant="a")).forgotten_at is None
        assert b.id != a.id


async def test_erasing_a_scope_removes_its_policies_and_those_below(
    service: MemoryService,
) -> None:
    await service.policies.set(TENANT, half_life=DAY)
    await service.policies.set(PROJECT, half_life=DAY)
    await service.policies.set(Scope("acme", "bridge", "planner", "s-1"), half_life=DAY)
    await service.policies.set(Scope("acme", "deck"), half_life=DAY)
    receipt = await service.erase(PROJECT)
    assert receipt.removed["memory_policies"] == 2
    assert [p.scope for p in await service.policies.list()] == [TENANT, Scope("acme", "deck")]
