"""The blocking client: same names, thread-safe, no lost writes."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import numpy as np
import pytest

from memsvc import ConflictError, HashingEmbedder, NotFoundError, Scope, Settings
from memsvc.sync import SyncMemoryService


@pytest.fixture
def sync_service(settings: Settings) -> SyncMemoryService:
    service = SyncMemoryService.open(settings, embedder=HashingEmbedder())
    yield service  # type: ignore[misc]
    service.close()


def test_same_names_without_await(sync_service: SyncMemoryService, scope: Scope) -> None:
    memory = sync_service.memories.add(scope, "the user prefers metric units")
    assert sync_service.memories.get(memory.id) == memory
    hits = sync_service.memories.search(scope, "metric units", k=3)
    assert hits[0].memory.id == memory.id
    with pytest.raises(ConflictError):
        sync_service.memories.update(memory.id, content="x", expected_version=7)


def test_as_of_reads_without_await(sync_service: SyncMemoryService, scope: Scope) -> None:
    memory = sync_service.memories.add(scope, "first words")
    then = datetime.now(UTC)
    sync_service.memories.update(memory.id, content="second words")
    sync_service.memories.put(scope, "status", "added later")
    assert sync_service.memories.get(memory.id, as_of=then).content == "first words"
    assert [m.content for m in sync_service.memories.list(scope, as_of=then)] == ["first words"]
    assert sync_service.memories.count(scope, as_of=then) == 1
    with pytest.raises(NotFoundError):
        sync_service.memories.get_by_key(scope, "status", as_of=then)


def test_valid_time_without_await(sync_service: SyncMemoryService, scope: Scope) -> None:
    march, june = datetime(2024, 3, 1, tzinfo=UTC), datetime(2024, 6, 1, tzinfo=UTC)
    paris = sync_service.memories.add(scope, "Ana lives in Paris", valid_from=march)
    berlin = sync_service.memories.supersede(paris.id, "Ana lives in Berlin", valid_from=june)
    hits = sync_service.memories.search(scope, "Ana lives", k=5)
    assert [h.memory.id for h in hits] == [berlin.id]
    april = datetime(2024, 4, 1, tzinfo=UTC)
    assert [m.id for m in sync_service.memories.list(scope, valid_at=april)] == [paris.id]
    ended = sync_service.memories.invalidate(berlin.id, at=datetime(2024, 9, 1, tzinfo=UTC))
    assert ended.valid_to is not None and sync_service.memories.count(scope) == 0
    with pytest.raises(ConflictError):
        sync_service.memories.supersede(paris.id, "Ana lives in Rome")


def test_forgetting_and_dedupe_without_await(
    sync_service: SyncMemoryService, scope: Scope
) -> None:
    tenant = Scope(scope.tenant)
    policy = sync_service.policies.set(tenant, half_life=3600)
    assert sync_service.policies.get(tenant) == policy
    weak = sync_service.memories.add(scope, "trivial", importance=0.0)
    vector = [1.0] + [0.0] * 383
    first = sync_service.memories.add(scope, "Ana lives in Porto", embedding=vector)
    again = sync_service.memories.add(
        scope, "Ana lives in Porto.", embedding=vector, dedupe="semantic"
    )
    assert again.merged and again.id == first.id and again.reinforced_count == 1
    assert sync_service.memories.restore(weak.id).forgotten_at is None
    assert sync_service.policies.delete(tenant)


def test_10_threads_x_20_puts_and_adds_leave_200_memories(
    sync_service: SyncMemoryService,
) -> None:
    scope = Scope("threads", "p", "a", "s")
    errors: list[BaseException] = []

    def agent_tool(thread: int) -> None:
        try:
            for i in range(20):
                if i % 2:
                    sync_service.memories.put(scope, f"t{thread}/k{i}", f"value {thread} {i}")
                else:
                    sync_service.memories.add(scope, f"thread {thread} memory {i}")
        except BaseException as exc:  # surfaced below, in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=agent_tool, args=(t,)) for t in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sync_service.memories.count(scope) == 200


def test_working_memory_through_the_sync_client(
    sync_service: SyncMemoryService, scope: Scope
) -> None:
    wm = sync_service.working(scope)
    wm.set("draft", {"step": 1})
    wm.append_scratchpad("note")
    checkpoint = wm.create_checkpoint("before")
    wm.set("draft", {"step": 2})
    wm.restore_checkpoint(checkpoint)
    assert wm.get("draft") == {"step": 1}
    assert wm.get_scratchpad() == ["note"]


def test_maintenance_without_await(sync_service: SyncMemoryService, scope: Scope) -> None:
    """Consolidation, gc and the doctor block like the rest (issue 30 asked for consolidate)."""
    base = np.random.default_rng(3).standard_normal(384)
    texts = ["The user has a cat.", "The cat is called Miso.", "Miso the cat is three."]
    members = []
    for seed, text in enumerate(texts):
        vector = base + 0.02 * np.random.default_rng(seed + 10).standard_normal(384)
        members.append(sync_service.memories.add(scope, text, embedding=vector.tolist()))
    report = sync_service.maintenance.consolidate(scope, min_cluster=3)
    assert report.made == 1 and len(report.summaries) == 1
    summary = sync_service.memories.get(report.summaries[0])
    assert sorted(summary.metadata["derived_from"]) == sorted(str(m.id) for m in members)
    assert sync_service.maintenance.consolidate(scope, min_cluster=3).made == 0
    assert sync_service.maintenance.gc().expired_deleted == 0
