"""Semantic deduplication of writes: add/add_many(dedupe=...), merges, races (real PostgreSQL)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from memsvc import MemoryService, Scope, Settings, ValidationError
from memsvc.memories.dedupe_rule import identifiers, raised_importance, same_identifiers
from memsvc.testing.postgres import TestPostgres, settings_for_tests
from tests.lock_waits import WAITING_FOR_A_LOCK

SCOPE = Scope("acme", "bridge")
DIM = 384


def direction(seed: int) -> np.ndarray:
    vector = np.random.default_rng(seed).normal(size=DIM)
    return vector / np.linalg.norm(vector)


def near(vector: np.ndarray, cosine: float, seed: int) -> np.ndarray:
    """A unit vector at exactly ``cosine`` from ``vector``."""
    other = direction(seed)
    other -= other.dot(vector) * vector
    other /= np.linalg.norm(other)
    return cosine * vector + np.sqrt(1 - cosine**2) * other


FACT = direction(1)


async def rows(service: MemoryService, scope: Scope = SCOPE) -> int:
    async with service.pool.acquire() as conn:
        found: int = await conn.fetchval(
            "SELECT count(*) FROM memsvc.memories WHERE tenant_id = $1 AND project_id "
            "IS NOT DISTINCT FROM $2",
            scope.tenant,
            scope.project,
        )
        return found


# ----------------------------------------------------------------- the rule


def test_identifiers_are_the_tokens_with_a_digit() -> None:
    assert identifiers("Esther uses employee number BA-03855.") == {"ba-03855"}
    assert identifiers("Moved in March 2024, flat 4b.") == {"2024", "4b"}
    assert not same_identifiers("badge BA-03855", "badge LO-49525")
    assert same_identifiers("Ana lives in Porto", "Ana's home is Porto")
    assert raised_importance(0.5, 0.5) == 0.625
    assert raised_importance(0.2, 0.9) == 0.9
    assert raised_importance(1.0, 1.0) == 1.0


# ----------------------------------------------------------------- add


async def test_a_paraphrase_is_merged_into_the_memory_it_repeats(service: MemoryService) -> None:
    first = await service.memories.add(
        SCOPE, "Ana lives in Porto", embedding=FACT, metadata={"n": 1}, importance=0.5
    )
    again = await service.memories.add(
        SCOPE, "Ana's home is Porto", embedding=near(FACT, 0.95, 2), metadata={"n": 2},
        importance=0.5, dedupe="semantic",
    )  # fmt: skip
    assert again.merged and again.id == first.id and not first.merged
    assert again.content == "Ana lives in Porto" and again.metadata == {"n": 1}
    assert again.reinforced_count == 1 and again.last_reinforced_at is not None
    assert again.importance == pytest.approx(0.625) and again.version == 2
    assert await rows(service) == 1
    stored = await service.memories.get(first.id)
    assert stored.reinforced_count == 1 and not stored.merged
    history = await service.memories.history(first.id)
    assert [e.kind for e in history] == ["created", "updated"]
    assert history[1].prior is not None
    assert history[1].prior["merged"]["content"] == "Ana's home is Porto"
    assert history[1].prior["merged"]["metadata"] == {"n": 2}


async def test_below_the_threshold_or_with_other_identifiers_a_write_is_stored(
    service: MemoryService,
) -> None:
    await service.memories.add(SCOPE, "badge BA-03855", embedding=FACT)
    porto = near(FACT, 0.85, 3)
    apart = await service.memories.add(
        SCOPE, "Ana lives in Porto", embedding=porto, dedupe="semantic"
    )
    other_id = await service.memories.add(
        SCOPE, "badge LO-49525", embedding=FACT, dedupe="semantic"
    )
    looser = await service.memories.add(
        SCOPE, "Ana's home is Porto", embedding=near(porto, 0.84, 4), dedupe="semantic",
        dedupe_threshold=0.8,
    )  # fmt: skip
    assert not apart.merged and not other_id.merged
    assert looser.merged and looser.id == apart.id
    assert await rows(service) == 3


async def test_exact_mode_keeps_near_duplicates_and_off_keeps_exact_ones(
    service: MemoryService,
) -> None:
    a = await service.memories.add(SCOPE, "Ana lives in Porto", embedding=FACT)
    b = await service.memories.add(SCOPE, "Ana's home is Porto", embedding=near(FACT, 0.99, 5))
    assert a.id != b.id and not b.merged
    same = await service.memories.add(SCOPE, "Ana lives in Porto", embedding=FACT)
    assert same.id == a.id and not same.merged
    copy = await service.memories.add(SCOPE, "Ana lives in Porto", embedding=FACT, dedupe="off")
    batch = await service.memories.add_many(SCOPE, ["Ana lives in Porto"] * 2, dedupe="off")
    assert len({a.id, copy.id, *(m.id for m in batch)}) == 4
    assert await rows(service) == 5
    # An exact add still finds the one memory under the unique index.
    assert (await service.memories.add(SCOPE, "Ana lives in Porto")).id == a.id


async def test_the_setting_makes_semantic_the_default(settings: Settings) -> None:
    semantic = settings.model_copy(update={"dedupe": "semantic"})
    async with MemoryService.open(semantic) as service:
        first = await service.memories.add(SCOPE, "Ana lives in Porto", embedding=FACT)
        again = await service.memories.add(SCOPE, "Ana lives in Porto!", embedding=FACT)
        assert again.merged and again.id == first.id
        kept = await service.memories.add(SCOPE, "x", embedding=FACT, dedupe="exact")
        assert not kept.merged


async def test_never_merged_across_scopes_keys_or_into_forgotten_or_expired_memories(
    service: MemoryService,
) -> None:
    keyed = await service.memories.put(SCOPE, "home", "Ana lives in Porto", embedding=FACT)
    session = await service.memories.add(
        Scope("acme", "bridge", None, "s"), "Ana lives in Porto", embedding=FACT
    )
    expiring = await service.memories.add(
        Scope("acme", "ttl"), "Ana lives in Porto", embedding=FACT, ttl=0.001
    )
    await service.policies.set(Scope("acme", "old"), half_life=1)
    weak = await service.memories.add(
        Scope("acme", "old"), "Ana lives in Porto", embedding=FACT, importance=0.0
    )
    await service.maintenance.forget(Scope("acme", "old"))
    await asyncio.sleep(0.01)
    for scope in (SCOPE, Scope("acme", "ttl"), Scope("acme", "old")):
        written = await service.memories.add(
            scope, "Ana's home is Porto", embedding=near(FACT, 0.99, 6), dedupe="semantic"
        )
        assert not written.merged
        assert written.id not in (keyed.id, session.id, expiring.id, weak.id)


async def test_bad_dedupe_arguments_are_refused_naming_them(service: MemoryService) -> None:
    for kwargs, field in (
        ({"dedupe": "fuzzy"}, "dedupe"),
        ({"dedupe_threshold": 0}, "dedupe_threshold"),
        ({"dedupe_threshold": 1.5}, "dedupe_threshold"),
        ({"dedupe_threshold": True}, "dedupe_threshold"),
    ):
        with pytest.raises(ValidationError) as caught:
            await service.memories.add(SCOPE, "x", **kwargs)  # type: ignore[arg-type]
        assert caught.value.field == field
        with pytest.raises(ValidationError):
            await service.memories.add_many(SCOPE, ["x"], **kwargs)  # type: ignore[arg-type]
    assert await rows(service) == 0


async def test_add_many_merges_into_stored_memories_and_earlier_items(
    service: MemoryService,
) -> None:
    stored = await service.memories.add(SCOPE, "Ana lives in Porto", embedding=FACT)
    other = direction(9)
    result = await service.memories.add_many(
        SCOPE,
        [
            {"content": "Ana's home is Porto", "embedding": near(FACT, 0.97, 7)},
            {"content": "Ben works at Acme", "embedding": other},
            {"content": "Ben is employed by Acme", "embedding": near(other, 0.96, 8)},
            {"content": "Ben works at Acme"},  # exact: the item stored above
        ],
        dedupe="semantic",
    )
    assert [m.merged for m in result] == [True, False, True, True]
    assert result[0].id == stored.id
    assert result[2].id == result[1].id == result[3].id
    assert await rows(service) == 2
    assert (await service.memories.get(result[1].id)).reinforced_count == 2


async def test_a_reinforcement_renews_a_memorys_strength(service: MemoryService) -> None:
    await service.policies.set(Scope("acme"), half_life=timedelta(days=1))
    repeated = await service.memories.add(SCOPE, "Ana lives in Porto", embedding=FACT)
    once = await service.memories.add(SCOPE, "Ben works at Acme", embedding=direction(10))
    async with service.pool.acquire() as conn:
        await conn.execute("UPDATE memsvc.memories SET created_at = now() - interval '30 days'")
    await service.memories.add(SCOPE, "Ana lives in Porto.", embedding=FACT, dedupe="semantic")
    assert (await service.maintenance.forget()).ids == [once.id]
    assert [m.id for m in await service.memories.list(SCOPE)] == [repeated.id]


# ----------------------------------------------------------------- races


PARAPHRASES = [f"Ana lives in Porto (way {chr(ord('a') + i)})" for i in range(20)]


async def warm(service: MemoryService) -> None:
    """Open every connection of the pool first, so the writers really run at once."""
    held = [await service.pool.acquire() for _ in range(service.pool.get_max_size())]
    for conn in held:
        await service.pool.release(conn)


async def test_20_racing_paraphrases_leave_exactly_one_memory(service: MemoryService) -> None:
    vectors = [near(FACT, 0.97, 100 + i) for i in range(20)]
    await warm(service)
    results = await asyncio.gather(
        *(
            service.memories.add(SCOPE, text, embedding=vector, dedupe="semantic")
            for text, vector in zip(PARAPHRASES, vectors, strict=True)
        )
    )
    assert len({m.id for m in results}) == 1
    assert sum(not m.merged for m in results) == 1
    assert await rows(service) == 1
    assert (await service.memories.get(results[0].id)).reinforced_count == 19


async def test_naive_search_then_add_stores_each_racing_paraphrase(
    service: MemoryService,
) -> None:
    """The control: look for a near-duplicate, then add if none, without the
    scope's lock. Every writer looks before any has written."""
    vectors = [near(FACT, 0.97, 100 + i) for i in range(20)]
    looked = asyncio.Barrier(20)

    async def naive(text: str, vector: np.ndarray) -> None:
        hits = await service.memories.search(SCOPE, vector, k=1)
        await looked.wait()
        if not hits or (hits[0].similarity or 0) < 0.9:
            await service.memories.add(SCOPE, text, embedding=vector)

    await asyncio.gather(*(naive(t, v) for t, v in zip(PARAPHRASES, vectors, strict=True)))
    assert await rows(service) == 20


# ----------------------------------------------------------------- after the fact


async def test_a_dedupe_pass_merges_stored_near_duplicates_within_each_scope(
    service: MemoryService,
) -> None:
    other_scope = Scope("acme", "deck")
    oldest = await service.memories.add(SCOPE, "Ana lives in Porto", embedding=FACT)
    copies = [
        await service.memories.add(SCOPE, text, embedding=near(FACT, 0.97, 20 + i))
        for i, text in enumerate(["Ana's home is Porto", "Ana resides in Porto"])
    ]
    exact_copy = await service.memories.add(SCOPE, "Ana lives in Porto", embedding=FACT,
                                            dedupe="off")
    other_id = await service.memories.add(SCOPE, "Ana lives in Porto 2", embedding=FACT)
    keyed = await service.memories.put(SCOPE, "home", "Ana lives in Porto!", embedding=FACT)
    elsewhere = await service.memories.add(other_scope, "Ana lives in Porto", embedding=FACT)

    report = await service.maintenance.dedupe(Scope("acme"), 0.9, batch_size=2)
    assert report.merged == 2 and report.batches >= 3 and report.scopes == 2
    assert {merged for merged, _ in report.merges} == {copies[0].id, copies[1].id}
    assert {kept for _, kept in report.merges} == {oldest.id}
    left = {m.id for m in await service.memories.list(Scope("acme"), include="descendants")}
    # The copy stored with dedupe="off" was asked to stay apart: the pass keeps it.
    assert left == {oldest.id, exact_copy.id, other_id.id, keyed.id, elsewhere.id}
    kept = await service.memories.get(oldest.id)
    assert kept.reinforced_count == 2
    merged_wordings = [
        e.prior["merged"]["content"]
        for e in await service.memories.history(oldest.id)
        if e.prior and "merged" in e.prior
    ]
    assert sorted(merged_wordings) == sorted(["Ana's home is Porto", "Ana resides in Porto"])
    again = await service.maintenance.dedupe(Scope("acme"), 0.9)
    assert again.merged == 0


async def test_import_with_semantic_dedupe_merges_what_the_file_repeats(
    service: MemoryService, tmp_path: Path
) -> None:
    for i, text in enumerate(["Ana lives in Porto", "Ana's home is Porto", "Ben works at Acme"]):
        vector = direction(30) if i == 2 else near(FACT, 0.97, 40 + i)
        await service.memories.add(SCOPE, text, embedding=vector)
    dump = tmp_path / "dump.jsonl"
    await service.maintenance.export(dump)
    await service.memories.delete_scope(Scope("acme"))
    plain = await service.maintenance.import_file(dump)
    assert plain.merged == 0 and await service.memories.count(SCOPE) == 3
    await service.memories.delete_scope(Scope("acme"))
    report = await service.maintenance.import_file(dump, dedupe="semantic")
    assert report.memories.inserted == 3 and report.merged == 1
    assert await service.memories.count(SCOPE) == 2


# ------------------------------------------------- what a merge keeps and carries


async def test_a_pinned_write_pins_the_memory_it_merges_into(service: MemoryService) -> None:
    await service.memories.add(SCOPE, "Ana is allergic to nuts.", embedding=FACT)
    merged = await service.memories.add(
        SCOPE, "Ana has a nut allergy.", embedding=FACT, pinned=True, dedupe="semantic"
    )
    assert merged.merged and merged.pinned
    exact = await service.memories.add(SCOPE, "Ana likes tea.")
    again = await service.memories.add(SCOPE, "Ana likes tea.", pinned=True)
    assert again.id == exact.id and again.pinned
    assert (await service.memories.get(exact.id)).pinned


async def test_a_merged_write_valid_from_earlier_moves_the_fact_back(
    service: MemoryService,
) -> None:
    stored = await service.memories.add(SCOPE, "Ana lives in Paris.", embedding=FACT)
    since = datetime(2020, 1, 1, tzinfo=UTC)
    merged = await service.memories.add(
        SCOPE, "Ana has lived in Paris.", embedding=FACT, valid_from=since, dedupe="semantic"
    )
    assert merged.id == stored.id and merged.valid_from == since
    hits = await service.memories.search(
        SCOPE, FACT.tolist(), k=5, valid_at=datetime(2022, 1, 1, tzinfo=UTC)
    )
    assert [h.memory.id for h in hits] == [stored.id]
    event = (await service.memories.history(stored.id))[-1]
    assert event.prior is not None and event.prior["merged"]["valid_from"] is not None
    # A later valid_from leaves the earlier one.
    later = await service.memories.add(
        SCOPE, "Ana still lives in Paris.", embedding=FACT, valid_from=datetime(2024, 1, 1,
        tzinfo=UTC), dedupe="semantic",
    )
    assert later.id == stored.id and later.valid_from == since


async def test_the_dedupe_pass_carries_a_pin_and_keeps_memories_stored_apart(
    service: MemoryService,
) -> None:
    plain = await service.memories.add(SCOPE, "Ana is allergic to nuts.", embedding=FACT,
                                       dedupe="off")
    pinned = await service.memories.add(SCOPE, "Ana has a nut allergy.", embedding=FACT,
                                        pinned=True)
    report = await service.maintenance.dedupe(SCOPE)
    assert report.merges == [(pinned.id, plain.id)]
    assert (await service.memories.get(plain.id)).pinned
    apart = await service.memories.add(SCOPE, "Ana is allergic to peanuts.", embedding=FACT,
                                       dedupe="off")
    assert (await service.maintenance.dedupe(SCOPE)).merges == []
    assert (await service.memories.get(apart.id)).content == "Ana is allergic to peanuts."


async def test_the_dedupe_pass_never_deletes_a_successor(service: MemoryService) -> None:
    other = direction(4)
    await service.memories.add(SCOPE, "Ana lives in Berlin.", embedding=FACT)
    paris = await service.memories.add(
        SCOPE, "Ana lives in Paris.", embedding=other, valid_from=datetime(2024, 3, 1, tzinfo=UTC)
    )
    berlin = await service.memories.supersede(paris.id, "Ana moved to Berlin.", embedding=FACT)
    assert (await service.maintenance.dedupe(SCOPE)).merges == []
    old = await service.memories.get(paris.id)
    assert old.superseded_by == berlin.id
    assert (await service.memories.get(berlin.id)).supersedes == (paris.id,)




async def test_a_write_never_merges_into_a_memory_superseded_meanwhile(
    service: MemoryService,
) -> None:
    paris = await service.memories.add(SCOPE, "Ana lives in Paris.", embedding=FACT)
    async with service.pool.acquire() as conn, conn.transaction():
        berlin = await service.memories.supersede(
            paris.id, "Ana moved to Berlin.", embedding=direction(2), conn=conn
        )
        add = asyncio.create_task(service.memories.add(
            SCOPE, "Ana lives in Paris!", embedding=FACT, dedupe="semantic"
        ))
        # The add read Paris as valid and now waits for its row.
        async with service.pool.acquire() as admin:
            while not await admin.fetchval(WAITING_FOR_A_LOCK):
                await asyncio.sleep(0.02)
    got = await add
    assert not got.merged and got.id not in (paris.id, berlin.id)
    assert got.valid_to is None
    valid = {m.content for m in await service.memories.list(SCOPE)}
    assert valid == {"Ana moved to Berlin.", "Ana lives in Paris!"}


@pytest.fixture
async def l2_service(memsvc_postgres: TestPostgres) -> AsyncIterator[MemoryService]:
    """A service on a store searched by l2 distance (an order that is not the cosine's)."""
    name = f"memsvc_l2_{uuid.uuid4().hex[:10]}"
    dsn = await memsvc_postgres.create_database(name)
    settings = settings_for_tests(dsn, distance="l2", auto_migrate=True)
    try:
        async with MemoryService.open(settings) as svc:
            yield svc
    finally:
        await memsvc_postgres.drop_database(name)


async def test_the_most_similar_candidate_is_found_whatever_the_search_distance(
    l2_service: MemoryService,
) -> None:
    # Nearest by l2 is the short vector at cosine 0.5; the long one in the
    # write's very direction is at cosine 1.
    far_same = await l2_service.memories.add(SCOPE, "Ana lives in Porto", embedding=10 * FACT)
    await l2_service.memories.add(SCOPE, "Ana likes jazz", embedding=near(FACT, 0.5, 3))
    got = await l2_service.memories.add(
        SCOPE, "Ana's home is Porto", embedding=FACT, dedupe="semantic"
    )
    assert got.merged and got.id == far_same.id
    copy = await l2_service.memories.add(SCOPE, "Ana resides in Porto", embedding=FACT)
    report = await l2_service.maintenance.dedupe(SCOPE, 0.9)
    assert report.merges == [(copy.id, far_same.id)]
