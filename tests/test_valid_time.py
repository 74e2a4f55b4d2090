"""Valid time: valid_from/valid_to, supersession, invalidation, and reads by validity."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from memsvc import (
    ConflictError,
    HashingEmbedder,
    MemoryService,
    NotFoundError,
    Scope,
    ValidationError,
)
from memsvc.testing.postgres import MigratedTemplate, TestPostgres, settings_for_tests
from tests.changes.helpers import take
from tests.reliability.servers import database_behind_pgbouncer

MARCH = datetime(2024, 3, 1, tzinfo=UTC)
JUNE = datetime(2024, 6, 1, tzinfo=UTC)
SEPTEMBER = datetime(2024, 9, 1, tzinfo=UTC)


async def _rows(service: MemoryService) -> tuple[int, int]:
    async with service.pool.acquire() as conn:
        memories = await conn.fetchval("SELECT count(*) FROM memsvc.memories")
        events = await conn.fetchval("SELECT count(*) FROM memsvc.memory_events")
    return memories, events


# ------------------------------------------------------------------ writes


async def test_a_new_memory_is_valid_from_its_transaction_time(
    service: MemoryService, scope: Scope
) -> None:
    m = await service.memories.add(scope, "the user lives in Paris")
    assert m.valid_from == m.created_at and m.valid_to is None
    stored = await service.memories.get(m.id)
    assert stored.valid_from == m.created_at and stored.valid_to is None
    assert stored.supersedes == () and stored.superseded_by is None
    dated = await service.memories.add(scope, "the user moved to Paris", valid_from=MARCH)
    assert dated.valid_from == MARCH
    assert (await service.memories.get(dated.id)).valid_from == MARCH


async def test_supersede_links_both_ways_and_closes_the_old_validity(
    service: MemoryService, scope: Scope
) -> None:
    paris = await service.memories.add(
        scope, "Ana lives in Paris", valid_from=MARCH, metadata={"slot": "city"}, importance=0.7
    )
    berlin = await service.memories.supersede(paris.id, "Ana lives in Berlin", valid_from=JUNE)
    assert berlin.valid_from == JUNE and berlin.supersedes == (paris.id,)
    assert berlin.scope == scope
    stored_new = await service.memories.get(berlin.id)
    assert stored_new.supersedes == (paris.id,) and stored_new.superseded_by is None
    # metadata and importance default to the old memory's
    assert stored_new.metadata == {"slot": "city"} and stored_new.importance == 0.7
    old = await service.memories.get(paris.id)
    assert old.valid_to == JUNE and old.superseded_by == berlin.id and old.version == 2
    history = await service.memories.history(paris.id)
    assert [e.kind for e in history] == ["created", "superseded"]
    assert history[1].links == (berlin.id,)
    assert history[1].prior is not None and history[1].prior["valid_to"] is None
    created = (await service.memories.history(berlin.id))[0]
    assert created.kind == "created" and created.links == (paris.id,)


async def test_add_with_supersedes_closes_each_at_the_new_valid_from(
    service: MemoryService, scope: Scope
) -> None:
    a = await service.memories.add(scope, "employee id AB-1", valid_from=MARCH)
    b = await service.memories.add(scope, "badge number AB-1", valid_from=MARCH)
    new = await service.memories.add(
        scope, "employee id CD-2", valid_from=JUNE, supersedes=[a.id, str(b.id)]
    )
    for old in await service.memories.get_many([a.id, b.id]):
        assert old.valid_to == JUNE and old.superseded_by == new.id
    assert set(new.supersedes) == {a.id, b.id}


async def test_default_valid_from_closes_the_old_memory_at_the_same_moment(
    service: MemoryService, scope: Scope
) -> None:
    old = await service.memories.add(scope, "the sky is grey", valid_from=MARCH)
    new = await service.memories.supersede(old.id, "the sky is blue")
    assert new.valid_from == new.created_at
    assert (await service.memories.get(old.id)).valid_to == new.valid_from


async def test_invalidate_closes_validity_without_a_successor(
    service: MemoryService, scope: Scope
) -> None:
    project = await service.memories.add(scope, "Ana works on Apollo", valid_from=MARCH)
    ended = await service.memories.invalidate(project.id, at=SEPTEMBER)
    assert ended.valid_to == SEPTEMBER and ended.superseded_by is None
    history = await service.memories.history(project.id)
    assert [e.kind for e in history] == ["created", "invalidated"] and history[1].links == ()
    with pytest.raises(ConflictError):
        await service.memories.invalidate(project.id)
    with pytest.raises(ConflictError):
        await service.memories.supersede(project.id, "Ana works on Hermes")
    now_ended = await service.memories.add(scope, "Ana likes tea")
    assert (await service.memories.invalidate(now_ended.id, tenant="acme")).valid_to is not None


async def test_bad_valid_time_is_refused_naming_the_field_with_nothing_written(
    service: MemoryService, scope: Scope
) -> None:
    old = await service.memories.add(scope, "Ana lives in Paris", valid_from=JUNE)
    elsewhere = await service.memories.add(Scope("acme", "other"), "Ana lives in Rome")
    other_tenant = await service.memories.add(Scope("globex"), "Ana lives in Oslo")
    keyed = await service.memories.put(scope, "city", "Ana lives in Lyon")
    before = await _rows(service)
    cases = [
        (lambda: service.memories.add(scope, "x", valid_from=datetime(2024, 1, 1)), "valid_from"),
        (lambda: service.memories.add(scope, "x", valid_from="2024-01-01"), "valid_from"),
        (
            lambda: service.memories.add(
                scope, "x", valid_from=datetime(1, 1, 1, tzinfo=UTC)
            ),
            "valid_from",
        ),
        (lambda: service.memories.add(scope, "x", supersedes="abc"), "supersedes"),
        (lambda: service.memories.add(scope, "x", supersedes=["nope"]), "supersedes[0]"),
        (lambda: service.memories.supersede(old.id, "x", valid_from=MARCH), "valid_from"),
        (lambda: service.memories.supersede(old.id, "x", valid_from=JUNE), "valid_from"),
        (lambda: service.memories.invalidate(old.id, at=MARCH), "at"),
        (lambda: service.memories.add(scope, "x", supersedes=[elsewhere.id]), "supersedes"),
        (lambda: service.memories.add(scope, "x", supersedes=[keyed.id]), "supersedes"),
        (lambda: service.memories.add_many(scope, [{"content": "x", "valid_from": 3}]),
         "items[0].valid_from"),
        (lambda: service.memories.search(scope, "x", valid="later"), "valid"),
        (lambda: service.memories.list(scope, valid="all", valid_at=JUNE), "valid_at"),
        (lambda: service.memories.count(scope, valid_at=datetime(2024, 1, 1)), "valid_at"),
    ]
    for call, field in cases:
        with pytest.raises(ValidationError) as caught:
            await call()
        assert caught.value.field == field, (field, caught.value)
    # Another tenant's memory does not exist for this scope's writes.
    with pytest.raises(NotFoundError):
        await service.memories.add(scope, "x", supersedes=[other_tenant.id])
    with pytest.raises(NotFoundError):
        await service.memories.supersede(uuid.uuid4(), "x")
    assert await _rows(service) == before
    assert (await service.memories.get(old.id)).valid_to is None


async def test_superseding_with_content_stored_valid_now_is_refused_whole(
    service: MemoryService, scope: Scope
) -> None:
    paris = await service.memories.add(scope, "Ana lives in Paris")
    await service.memories.add(scope, "Ana lives in Rome")
    before = await _rows(service)
    with pytest.raises(ConflictError):
        await service.memories.supersede(paris.id, "Ana lives in Rome")
    assert await _rows(service) == before
    assert (await service.memories.get(paris.id)).valid_to is None


async def test_a_retried_supersession_with_the_same_id_returns_the_same_memory(
    service: MemoryService, scope: Scope
) -> None:
    old = await service.memories.add(scope, "Ana lives in Paris", valid_from=MARCH)
    new_id = uuid.uuid4()
    first = await service.memories.supersede(old.id, "Ana lives in Berlin", id=new_id)
    again = await service.memories.supersede(old.id, "Ana lives in Berlin", id=new_id)
    assert first.id == again.id == new_id
    assert await service.memories.count(scope, valid="all") == 2


async def test_racing_supersessions_of_one_memory_have_exactly_one_winner(
    service: MemoryService, scope: Scope
) -> None:
    old = await service.memories.add(scope, "Ana lives in Paris", valid_from=MARCH)

    async def attempt(i: int) -> uuid.UUID | None:
        try:
            return (await service.memories.supersede(old.id, f"Ana lives in city {i}")).id
        except ConflictError:
            return None

    outcomes = await asyncio.gather(*(attempt(i) for i in range(20)))
    winners = [o for o in outcomes if o is not None]
    assert len(winners) == 1
    assert (await service.memories.get(old.id)).superseded_by == winners[0]
    assert await service.memories.count(scope, valid="all") == 2
    history = await service.memories.history(old.id)
    assert [e.kind for e in history] == ["created", "superseded"]


async def test_naive_check_then_supersede_control_lets_several_win(
    service: MemoryService, scope: Scope
) -> None:
    """The control: read the old memory, see it valid, then write (no lock).

    Several writers must win here, or the test above could not see a double win.
    """
    old = await service.memories.add(scope, "Ana lives in Paris", valid_from=MARCH)
    barrier = asyncio.Barrier(20)

    async def naive(i: int) -> bool:
        current = await service.memories.get(old.id)
        await barrier.wait()  # every writer has read the memory as valid
        if current.valid_to is not None:
            return False
        await service.memories.add(scope, f"Ana lives in city {i}", valid_from=JUNE)
        return True

    outcomes = await asyncio.gather(*(naive(i) for i in range(20)))
    assert outcomes.count(True) > 1


# ------------------------------------------------------------------ reads


async def _paris_then_berlin(service: MemoryService, scope: Scope) -> tuple[uuid.UUID, uuid.UUID]:
    paris = await service.memories.add(scope, "Ana lives in Paris", valid_from=MARCH)
    berlin = await service.memories.supersede(paris.id, "Ana lives in Berlin", valid_from=JUNE)
    return paris.id, berlin.id


@pytest.mark.parametrize("mode", ["vector", "text", "hybrid"])
async def test_every_search_mode_keeps_what_is_valid_as_asked(
    service: MemoryService, scope: Scope, mode: str
) -> None:
    paris, berlin = await _paris_then_berlin(service, scope)
    soon = datetime.now(UTC) + timedelta(days=30)
    await service.memories.add(scope, "Ana lives in Tokyo", valid_from=soon)

    async def ids(**options: object) -> set[uuid.UUID]:
        hits = await service.memories.search(scope, "Ana lives", mode=mode, k=10, **options)
        return {h.memory.id for h in hits}

    assert await ids() == {berlin}
    assert await ids(valid="now") == {berlin}
    assert await ids(valid_at=datetime(2024, 4, 1, tzinfo=UTC)) == {paris}
    assert await ids(valid_at=JUNE) == {berlin}
    assert await ids(valid_at=datetime(2024, 1, 1, tzinfo=UTC)) == set()
    assert len(await ids(valid="all")) == 3
    assert await ids(valid_at=datetime.now(UTC) + timedelta(days=60)) - {paris, berlin} != set()


async def test_recall_ranking_and_diversity_keep_what_is_valid_as_asked(
    service: MemoryService, scope: Scope
) -> None:
    paris, berlin = await _paris_then_berlin(service, scope)
    for options in ({"rank": "recall"}, {"diversity": 0.5}):
        now = await service.memories.search(scope, "Ana lives", k=5, **options)  # type: ignore[arg-type]
        then = await service.memories.search(
            scope, "Ana lives", k=5, valid_at=MARCH, **options  # type: ignore[arg-type]
        )
        assert [h.memory.id for h in now] == [berlin]
        assert [h.memory.id for h in then] == [paris]


async def test_list_and_count_read_by_validity_and_get_always_finds(
    service: MemoryService, scope: Scope
) -> None:
    paris, berlin = await _paris_then_berlin(service, scope)
    assert [m.id for m in await service.memories.list(scope)] == [berlin]
    assert [m.id for m in await service.memories.list(scope, valid_at=MARCH)] == [paris]
    assert {m.id for m in await service.memories.list(scope, valid="all")} == {paris, berlin}
    assert await service.memories.count(scope) == 1
    assert await service.memories.count(scope, valid="all") == 2
    assert await service.memories.count(scope, valid_at=datetime(2023, 1, 1, tzinfo=UTC)) == 0
    got = await service.memories.get(paris)
    assert got.valid_to == JUNE and got.superseded_by == berlin


async def test_a_filtered_search_returns_a_full_page_past_superseded_rows(
    service: MemoryService, scope: Scope
) -> None:
    for i in range(40):
        old = await service.memories.add(scope, f"fact {i} version one", valid_from=MARCH)
        if i % 4:
            await service.memories.supersede(old.id, f"fact {i} version two", valid_from=JUNE)
    # 40 valid now (10 never changed, 30 new versions), 30 closed
    for include in ("exact", "ancestors"):
        hits = await service.memories.search(
            Scope("acme", "bridge", "planner", "s-42"), "fact version", k=40, include=include,
            mode="vector",
        )
        assert len(hits) == 40
        assert all(h.memory.valid_to is None for h in hits)
    parent = await service.memories.search(
        Scope("acme", "bridge"), "fact version one", k=30, include="descendants",
        mode="vector", valid_at=datetime(2024, 4, 1, tzinfo=UTC),
    )
    assert len(parent) == 30 and all("one" in h.memory.content for h in parent)


async def test_as_of_with_valid_at_tells_what_was_believed_then(
    service: MemoryService, scope: Scope
) -> None:
    paris = await service.memories.add(scope, "Ana lives in Paris", valid_from=MARCH)
    await asyncio.sleep(0.01)
    believed_at = datetime.now(UTC)
    await asyncio.sleep(0.01)
    berlin = await service.memories.supersede(paris.id, "Ana lives in Berlin", valid_from=JUNE)
    july = datetime(2024, 7, 1, tzinfo=UTC)
    # What we believed at believed_at about July: Paris (the move was not known yet).
    then = await service.memories.list(scope, as_of=believed_at, valid_at=july)
    assert [m.id for m in then] == [paris.id] and then[0].valid_to is None
    # What we believe now about July: Berlin.
    assert [m.id for m in await service.memories.list(scope, valid_at=july)] == [berlin.id]
    # valid="now" with as_of: valid at that moment.
    assert await service.memories.count(scope, as_of=believed_at) == 1
    assert await service.memories.count(scope, as_of=datetime.now(UTC), valid_at=MARCH) == 1
    assert await service.memories.count(scope, as_of=datetime.now(UTC), valid="all") == 2
    old_then = await service.memories.get(paris.id, as_of=believed_at)
    assert old_then.valid_to is None and old_then.superseded_by is None
    old_now = await service.memories.get(paris.id, as_of=datetime.now(UTC))
    assert old_now.valid_to == JUNE and old_now.superseded_by == berlin.id


async def test_exact_dedupe_matches_only_a_memory_valid_now(
    service: MemoryService, scope: Scope
) -> None:
    lisbon = await service.memories.add(scope, "Ana lives in Lisbon.", valid_from=MARCH)
    assert (await service.memories.add(scope, "Ana lives in Lisbon.")).id == lisbon.id
    porto = await service.memories.supersede(lisbon.id, "Ana lives in Porto.", valid_from=JUNE)
    back = await service.memories.supersede(porto.id, "Ana lives in Lisbon.", valid_from=SEPTEMBER)
    assert back.id != lisbon.id and back.valid_from == SEPTEMBER
    again = await service.memories.add(scope, "Ana lives in Lisbon.")
    assert again.id == back.id
    many = await service.memories.add_many(scope, ["Ana lives in Lisbon.", "Ana has a cat."])
    assert many[0].id == back.id
    assert await service.memories.count(scope, valid="all") == 4


async def test_add_many_takes_each_items_valid_from(service: MemoryService, scope: Scope) -> None:
    stored = await service.memories.add_many(
        scope, [{"content": "a", "valid_from": MARCH}, "b"]
    )
    assert stored[0].valid_from == MARCH
    assert stored[1].valid_from == stored[1].created_at


async def test_put_makes_a_replaced_value_valid_again(service: MemoryService, scope: Scope) -> None:
    first = await service.memories.put(scope, "status", "away")
    await service.memories.invalidate(first.id)
    assert await service.memories.count(scope) == 0
    replaced = await service.memories.put(scope, "status", "back")
    assert replaced.valid_to is None and await service.memories.count(scope) == 1


async def test_put_takes_the_moment_its_value_started_to_hold(
    service: MemoryService, scope: Scope
) -> None:
    march = datetime(2024, 3, 1, tzinfo=UTC)
    first = await service.memories.put(scope, "city", "Paris", valid_from=march)
    assert first.valid_from == march
    june = datetime(2024, 6, 1, tzinfo=UTC)
    replaced = await service.memories.put(scope, "city", "Berlin", valid_from=june)
    assert replaced.id == first.id and replaced.valid_from == june
    plain = await service.memories.put(scope, "city", "Lyon")
    assert plain.valid_from > june  # the default: the write's own time
    with pytest.raises(ValidationError) as raised:
        await service.memories.put(scope, "city", "Rome", valid_from=datetime(2024, 1, 1))
    assert raised.value.field == "valid_from"
    assert (await service.memories.get(first.id)).content == "Lyon"


async def test_the_change_feed_carries_supersessions_and_invalidations(
    service: MemoryService, scope: Scope
) -> None:
    paris, berlin = await _paris_then_berlin(service, scope)
    await service.memories.invalidate(berlin)
    changes = await take(service.changes(with_values=True), 4)
    assert [(c.kind, c.memory_id) for c in changes] == [
        ("created", paris),
        ("superseded", paris),
        ("created", berlin),
        ("invalidated", berlin),
    ]
    assert changes[1].values is not None and changes[1].values["superseded_by"] == str(berlin)
    assert changes[1].values["valid_to"] is not None


async def test_valid_time_works_behind_pgbouncer(
    memsvc_postgres: TestPostgres, memsvc_template: MigratedTemplate, scope: Scope
) -> None:
    async with database_behind_pgbouncer(
        memsvc_postgres, memsvc_template.name, "memsvc_valid"
    ) as dsn:
        settings = settings_for_tests(dsn, pgbouncer=True)
        async with MemoryService.open(settings, embedder=HashingEmbedder()) as svc:
            paris = await svc.memories.add(scope, "Ana lives in Paris", valid_from=MARCH)
            berlin = await svc.memories.supersede(paris.id, "Ana lives in Berlin", valid_from=JUNE)
            april = datetime(2024, 4, 1, tzinfo=UTC)
            for mode in ("text", "vector", "hybrid"):
                now = await svc.memories.search(scope, "Ana lives", mode=mode, k=5)
                then = await svc.memories.search(
                    scope, "Ana lives", mode=mode, k=5, valid_at=april
                )
                assert [h.memory.id for h in now] == [berlin.id]
                assert [h.memory.id for h in then] == [paris.id]
            with pytest.raises(ConflictError):
                await svc.memories.invalidate(paris.id)


async def test_supersede_and_invalidate_run_in_the_callers_transaction(
    service: MemoryService, scope: Scope
) -> None:
    paris = await service.memories.add(scope, "Ana lives in Paris", valid_from=MARCH)
    before = await _rows(service)
    async with service.pool.acquire() as conn:
        transaction = conn.transaction()
        await transaction.start()
        berlin = await service.memories.supersede(
            paris.id, "Ana lives in Berlin", valid_from=JUNE, conn=conn
        )
        await service.memories.invalidate(berlin.id, at=SEPTEMBER, conn=conn)
        inside = await service.memories.get(paris.id, conn=conn)
        assert inside.superseded_by == berlin.id
        assert await service.memories.count(scope, valid="all", conn=conn) == 2
        await transaction.rollback()
    assert await _rows(service) == before
    assert (await service.memories.get(paris.id)).valid_to is None


async def test_a_forgotten_memory_cannot_be_superseded_or_invalidated(
    service: MemoryService, scope: Scope
) -> None:
    weak = await service.memories.add(scope, "Ana lives in Paris.", importance=0.0)
    await service.policies.set(scope, half_life=timedelta(days=1))
    assert (await service.maintenance.forget(scope)).ids == [weak.id]
    with pytest.raises(NotFoundError):
        await service.memories.supersede(weak.id, "Ana lives in Berlin.")
    with pytest.raises(NotFoundError):
        await service.memories.invalidate(weak.id)
    with pytest.raises(NotFoundError):
        await service.memories.add(scope, "Ana moved to Berlin.", supersedes=[weak.id])
    left = await service.memories.get(weak.id)
    assert left.valid_to is None and left.superseded_by is None
    assert [m.content for m in await service.memories.list(scope)] == []
    # Restored, it is a fact again and can be replaced.
    await service.memories.restore(weak.id)
    berlin = await service.memories.supersede(weak.id, "Ana lives in Berlin.")
    assert (await service.memories.get(weak.id)).superseded_by == berlin.id
