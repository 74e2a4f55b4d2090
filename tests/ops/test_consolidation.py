"""``svc.maintenance.consolidate``: clusters under summaries, incremental, exactly once."""

from __future__ import annotations

import asyncio
import math
import textwrap
import uuid
import zlib
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import numpy as np
import pytest

from memsvc import (
    ExtractiveSummarizer,
    MemoryService,
    OpenAIChatSummarizer,
    Scope,
    Settings,
    SummaryMember,
    ValidationError,
)
from memsvc.testing.postgres import settings_for_tests
from tests.extraction.fake_chat import serving
from tests.lock_waits import kill_when_it_waits_for_a_lock
from tests.ops.conftest import Cli
from tests.test_row_level_security import rls_database  # noqa: F401

pytestmark = pytest.mark.timeout(300)

SCOPE = Scope("acme", "bridge", "planner", "s-1")
DIM = 384
TOPICS = {
    "home": ["The user lives in Paris.", "Home is a flat in Paris.", "The user moved to Paris.",
             "The user's address is in Paris."],
    "pets": ["The user has a cat.", "The cat is called Miso.", "Miso the cat is three.",
             "The user feeds the cat at six."],
    "work": ["The user is a nurse.", "The user works night shifts.", "The hospital is nearby.",
             "The user's ward is cardiology."],
}
LONERS = ["The user dislikes jazz.", "The user once visited Oslo."]


def direction(seed: int) -> np.ndarray:
    vector = np.random.default_rng(seed).standard_normal(DIM)
    return vector / np.linalg.norm(vector)


def near(base: np.ndarray, seed: int, noise: float = 0.02) -> list[float]:
    """A unit vector close to ``base`` (cosine about 0.99 to its siblings)."""
    vector = base + noise * np.random.default_rng(seed).standard_normal(DIM)
    return (vector / np.linalg.norm(vector)).tolist()


BASES = {name: direction(i) for i, name in enumerate([*TOPICS, "extra", *LONERS])}


async def add_topic(
    svc: MemoryService, topic: str, contents: Sequence[str], start: int = 0
) -> list[uuid.UUID]:
    ids = []
    for i, content in enumerate(contents, start):
        memory = await svc.memories.add(
            SCOPE, content, embedding=near(BASES[topic], zlib.crc32(f"{topic}{i}".encode()))
        )
        ids.append(memory.id)
    return ids


async def seed_memories(svc: MemoryService) -> dict[str, list[uuid.UUID]]:
    ids = {topic: await add_topic(svc, topic, contents) for topic, contents in TOPICS.items()}
    for loner in LONERS:
        await svc.memories.add(SCOPE, loner, embedding=BASES[loner].tolist())
    return ids


async def clusters(svc: MemoryService) -> dict[uuid.UUID, set[uuid.UUID]]:
    """The scope's consolidation clusters: assembly id -> member ids."""
    found = {}
    for assembly in await svc.assemblies.list(SCOPE, limit=100):
        if assembly.metadata.get("kind") == "consolidation":
            members = await svc.assemblies.members(assembly.id, limit=1000)
            found[assembly.id] = {m.id for m in members}
    return found


async def summaries(svc: MemoryService) -> list[Any]:
    return [m for m in await svc.memories.list(SCOPE, limit=1000) if m.metadata.get("kind") ==
            "summary"]


async def assert_consistent(svc: MemoryService) -> dict[frozenset[uuid.UUID], Any]:
    """Every memory in at most one cluster; one summary per cluster, derived from its members."""
    found = await clusters(svc)
    counts = Counter(m for members in found.values() for m in members)
    assert [m for m, n in counts.items() if n > 1] == []
    written = await summaries(svc)
    assert len(written) == len(found)
    by_members = {}
    for summary in written:
        cluster = uuid.UUID(summary.metadata["consolidation"]["assembly_id"])
        members = {uuid.UUID(m) for m in summary.metadata["derived_from"]}
        assert members == found[cluster]
        by_members[frozenset(members)] = summary
    return by_members


async def test_related_memories_form_clusters_each_under_one_summary(
    service: MemoryService,
) -> None:
    ids = await seed_memories(service)
    report = await service.maintenance.consolidate(SCOPE)
    assert (report.made, report.joined, report.redone, report.considered) == (3, 0, 0, 14)
    by_members = await assert_consistent(service)
    assert set(by_members) == {frozenset(members) for members in ids.values()}
    home = by_members[frozenset(ids["home"])]
    assert home.key == f"consolidation:{home.metadata['consolidation']['assembly_id']}"
    assert home.content.startswith("The user")  # the medoid, with its distinguishing terms
    assert home.metadata["consolidation"]["summarizer"] == "extractive"
    assert set(report.summaries) == {s.id for s in by_members.values()}
    # Members stay.
    assert await service.memories.count(SCOPE) == 14 + 3


async def test_a_second_run_considers_only_new_memories_which_join_or_start_clusters(
    service: MemoryService,
) -> None:
    ids = await seed_memories(service)
    await service.maintenance.consolidate(SCOPE)
    before = await assert_consistent(service)
    home_summary = before[frozenset(ids["home"])]
    joining = await add_topic(service, "home", ["The user's flat in Paris has a balcony."], 10)
    extra = await add_topic(service, "extra", ["Extra one.", "Extra two.", "Extra three."])
    report = await service.maintenance.consolidate(SCOPE)
    assert (report.considered, report.joined, report.made, report.redone) == (4, 1, 1, 0)
    after = await assert_consistent(service)
    assert frozenset(ids["home"] + joining) in after and frozenset(extra) in after
    rewritten = after[frozenset(ids["home"] + joining)]
    assert rewritten.id == home_summary.id and rewritten.version == home_summary.version + 1
    again = await service.maintenance.consolidate(SCOPE)
    assert (again.considered, again.made, again.joined, again.summaries) == (0, 0, 0, ())


async def test_memories_left_alone_join_a_cluster_a_newer_memory_starts(
    service: MemoryService,
) -> None:
    first = await add_topic(service, "extra", ["Extra one.", "Extra two."])
    report = await service.maintenance.consolidate(SCOPE)
    assert (report.considered, report.made) == (2, 0)
    third = await add_topic(service, "extra", ["Extra three."], 2)
    report = await service.maintenance.consolidate(SCOPE)
    assert (report.considered, report.made) == (1, 1)
    assert set(await assert_consistent(service)) == {frozenset(first + third)}


async def test_a_deleted_member_makes_its_summary_stale_and_the_next_run_redoes_it(
    service: MemoryService,
) -> None:
    ids = await seed_memories(service)
    await service.maintenance.consolidate(SCOPE)
    await service.memories.delete(ids["pets"][0])
    report = await service.maintenance.consolidate(SCOPE)
    assert (report.redone, report.made, report.dissolved) == (1, 0, 0)
    assert frozenset(ids["pets"][1:]) in await assert_consistent(service)
    # Below min_cluster, the cluster goes (assembly and summary); its members stay.
    await service.memories.delete(ids["pets"][1])
    report = await service.maintenance.consolidate(SCOPE)
    assert report.dissolved == 1
    remaining = await assert_consistent(service)
    assert set(remaining) == {frozenset(ids["home"]), frozenset(ids["work"])}
    assert {m.id for m in await service.memories.get_many(ids["pets"][2:])} == set(
        ids["pets"][2:]
    )


async def test_a_changed_member_makes_its_summary_stale(service: MemoryService) -> None:
    ids = await seed_memories(service)
    await service.maintenance.consolidate(SCOPE)
    await service.memories.update(ids["work"][0], content="The user is a head nurse.")
    report = await service.maintenance.consolidate(SCOPE)
    assert report.redone == 1
    summary = (await assert_consistent(service))[frozenset(ids["work"])]
    assert "head" in summary.content or summary.content == "The user is a head nurse."


async def test_a_superseded_member_makes_its_summary_stale(service: MemoryService) -> None:
    ids = await seed_memories(service)
    await service.maintenance.consolidate(SCOPE)
    await service.memories.supersede(
        ids["home"][0], "The user lives in Berlin.", embedding=BASES["extra"].tolist()
    )
    report = await service.maintenance.consolidate(SCOPE)
    assert report.redone == 1
    assert frozenset(ids["home"][1:]) in await assert_consistent(service)


async def test_a_forgotten_memory_is_never_consolidated(service: MemoryService) -> None:
    contents = TOPICS["home"][:3]
    ids = await add_topic(service, "home", contents)
    secret = await service.memories.add(
        SCOPE, "The user's door code is 4711 Paris.",
        embedding=near(BASES["home"], 99), importance=0.01,
    )
    await service.policies.set(Scope("acme"), half_life=timedelta(days=1))
    forgotten = await service.maintenance.forget(
        SCOPE, now=secret.created_at + timedelta(days=5), below=0.005
    )
    assert forgotten.ids == [secret.id]
    await service.maintenance.consolidate(SCOPE)
    assert frozenset(ids) in await assert_consistent(service)
    derived = {uuid.UUID(x) for s in await summaries(service) for x in s.metadata["derived_from"]}
    assert secret.id not in derived


async def test_a_member_forgotten_later_makes_its_summary_stale(service: MemoryService) -> None:
    ids = await seed_memories(service)
    faint = await service.memories.add(
        SCOPE, "The user's door code is 4711 Paris.",
        embedding=near(BASES["home"], 99), importance=0.01,
    )
    await service.maintenance.consolidate(SCOPE)
    assert frozenset([*ids["home"], faint.id]) in await assert_consistent(service)
    await service.policies.set(Scope("acme"), half_life=timedelta(days=1))
    forgotten = await service.maintenance.forget(
        SCOPE, now=faint.created_at + timedelta(days=5), below=0.005, assembly_members=True
    )
    assert forgotten.ids == [faint.id]
    report = await service.maintenance.consolidate(SCOPE)
    assert report.redone == 1
    assert frozenset(ids["home"]) in await assert_consistent(service)


async def test_erasing_the_scope_leaves_no_consolidation_rows(
    service: MemoryService, settings: Settings
) -> None:
    await seed_memories(service)
    await service.maintenance.consolidate(SCOPE)
    await service.erase(SCOPE)
    assert settings.database_url is not None
    conn = await asyncpg.connect(settings.database_url)
    try:
        for table in ("consolidation_clusters", "consolidation_members"):
            assert await conn.fetchval(f"SELECT count(*) FROM memsvc.{table}") == 0
    finally:
        await conn.close()


async def test_recall_ranking_puts_members_below_their_summary(service: MemoryService) -> None:
    ids = await seed_memories(service)
    # Make a member more important than its summary would otherwise rank.
    await service.memories.update(ids["home"][1], importance=1.0)
    before = await service.memories.search(SCOPE, BASES["home"].tolist(), k=5, rank="recall")
    assert before[0].memory.id in ids["home"]
    await service.maintenance.consolidate(SCOPE)
    hits = await service.memories.search(SCOPE, BASES["home"].tolist(), k=6, rank="recall")
    assert hits[0].memory.metadata["kind"] == "summary"
    assert {h.memory.id for h in hits[1:5]} == set(ids["home"])
    assert all(hit.score < hits[0].score for hit in hits[1:])
    plain = await service.memories.search(SCOPE, BASES["home"].tolist(), k=6)
    assert {h.memory.id for h in plain} >= set(ids["home"])


class SlowSummarizer(ExtractiveSummarizer):
    """The extractive summary, after a pause (a model answering): racing runs overlap."""

    async def summarize(self, members: Sequence[SummaryMember]) -> str:
        await asyncio.sleep(0.05)
        return await super().summarize(members)


async def test_four_concurrent_runs_put_each_memory_in_one_cluster_with_one_summary(
    service: MemoryService,
) -> None:
    ids = await seed_memories(service)
    reports = await asyncio.gather(
        *(service.maintenance.consolidate(SCOPE, summarizer=SlowSummarizer()) for _ in range(4))
    )
    assert sum(r.made for r in reports) == 3
    by_members = await assert_consistent(service)
    assert set(by_members) == {frozenset(members) for members in ids.values()}


async def test_naive_control_check_then_create_puts_memories_in_several_clusters(
    service: MemoryService,
) -> None:
    """What the claim prevents: "in a cluster already?" read, then written, by racing runs."""
    ids = await seed_memories(service)
    # The summarizer answers after every run has checked (a sleep instead made
    # the race depend on timing: on a slow cluster the runs' checks did not
    # overlap, and the control then showed nothing).
    summarizer_answers = asyncio.Barrier(4)

    async def naive_run() -> None:
        for members in ids.values():
            taken = [await service.assemblies.memberships(m) for m in members]
            await summarizer_answers.wait()
            if any(taken):
                continue
            await service.assemblies.create(
                SCOPE, f"naive:{uuid.uuid4()}", metadata={"kind": "consolidation"},
                memory_ids=members,
            )

    await asyncio.gather(*(naive_run() for _ in range(4)))
    found = await clusters(service)
    counts = Counter(m for members in found.values() for m in members)
    assert max(counts.values()) > 1


class FailingSummarizer(ExtractiveSummarizer):
    """Fails on its second cluster: the run stops there, as a crash would."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    async def summarize(self, members: Sequence[SummaryMember]) -> str:
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("the process died here")
        return await super().summarize(members)


async def test_a_run_stopped_midway_is_resumed_by_the_next_without_duplicates(
    service: MemoryService,
) -> None:
    ids = await seed_memories(service)
    with pytest.raises(RuntimeError):
        await service.maintenance.consolidate(SCOPE, summarizer=FailingSummarizer())
    assert len(await assert_consistent(service)) == 1
    report = await service.maintenance.consolidate(SCOPE)
    assert report.made == 2
    assert set(await assert_consistent(service)) == {frozenset(m) for m in ids.values()}


async def test_the_openai_chat_summarizer_writes_the_summaries(service: MemoryService) -> None:
    ids = await seed_memories(service)
    with serving() as chat:
        summarizer = OpenAIChatSummarizer(chat.base_url, "summary-model", backoff_s=0.01)
        report = await service.maintenance.consolidate(SCOPE, summarizer=summarizer)
        assert chat.steps() == ["summary"] * 3
    assert report.made == 3
    home = (await assert_consistent(service))[frozenset(ids["home"])]
    assert all(content in home.content for content in TOPICS["home"])
    assert home.metadata["consolidation"]["model"] == "summary-model"


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"min_cluster": 1}, "min_cluster"),
        ({"min_cluster": True}, "min_cluster"),
        ({"threshold": 0}, "threshold"),
        ({"threshold": 1.5}, "threshold"),
        ({"threshold": math.nan}, "threshold"),
        ({"summarizer": object()}, "summarizer"),
    ],
)
async def test_bad_arguments_are_refused_naming_the_field(
    service: MemoryService, arguments: dict[str, Any], field: str
) -> None:
    await seed_memories(service)
    with pytest.raises(ValidationError) as raised:
        await service.maintenance.consolidate(SCOPE, **arguments)
    assert raised.value.field == field
    assert await clusters(service) == {}


async def test_consolidation_under_row_level_security_stays_in_its_tenant(
    rls_database: tuple[str, str],  # noqa: F811
) -> None:
    owner_dsn, runtime_dsn = rls_database
    settings = settings_for_tests(runtime_dsn, row_level_security=True)
    async with MemoryService.open(settings) as svc:
        for tenant in ("alpha", "beta"):
            for i, text in enumerate(TOPICS["pets"]):
                await svc.memories.add(
                    Scope(tenant, "p"), text, embedding=near(BASES["pets"], i)
                )
        report = await svc.maintenance.consolidate(Scope("alpha", "p"))
        assert (report.made, report.considered) == (1, 4)
    owner = await asyncpg.connect(owner_dsn)
    try:
        rows = await owner.fetch(
            "SELECT tenant_id, count(*) AS n FROM memsvc.consolidation_members GROUP BY 1"
        )
        assert {r["tenant_id"]: r["n"] for r in rows} == {"alpha": 4}
        assert await owner.fetchval("SELECT count(*) FROM memsvc.consolidation_clusters") == 1
    finally:
        await owner.close()


async def test_a_summary_is_valid_from_its_newest_members_fact(service: MemoryService) -> None:
    moments = [datetime(2024, month, 1, tzinfo=UTC) for month in (3, 9, 5)]
    for i, (text, moment) in enumerate(zip(TOPICS["home"], moments, strict=False)):
        await service.memories.add(
            SCOPE, text, embedding=near(BASES["home"], i), valid_from=moment
        )
    report = await service.maintenance.consolidate(SCOPE)
    summary = await service.memories.get(report.summaries[0])
    assert summary.valid_from == datetime(2024, 9, 1, tzinfo=UTC)
    assert summary.metadata["consolidation"]["valid_from"] == "2024-09-01T00:00:00+00:00"
    hits = await service.memories.search(
        SCOPE, near(BASES["home"], 9), k=5, valid_at=datetime(2024, 12, 1, tzinfo=UTC)
    )
    assert summary.id in {h.memory.id for h in hits}


async def test_the_consolidate_command_runs_it_on_a_scope(service: MemoryService, cli: Cli) -> None:
    await seed_memories(service)
    scope = ["--tenant", "acme", "--project", "bridge", "--agent", "planner", "--session", "s-1"]
    first = await cli("consolidate", *scope)
    assert first.exit_code == 0, first.output
    assert "clusters made: 3" in first.output and "memories considered: 14" in first.output
    again = await cli("consolidate", *scope, "--min-cluster", "2", "--threshold", "0.9")
    assert "clusters made: 0" in again.output and "memories considered: 0" in again.output
    bad = await cli("consolidate", "--tenant", "acme", "--threshold", "0")
    assert bad.exit_code == 2 and "threshold" in bad.output
    assert len(await assert_consistent(service)) == 3


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from memsvc import MemoryService, Scope
    from memsvc.testing.postgres import settings_for_tests

    async def main():
        async with MemoryService.open(settings_for_tests(sys.argv[1])) as svc:
            await svc.maintenance.consolidate(Scope("acme", "bridge", "planner", "s-1"))

    asyncio.run(main())
    """
)


@pytest.mark.slow
async def test_a_process_killed_inside_a_clusters_transaction_is_resumed_by_the_next_run(
    service: MemoryService, settings: Settings
) -> None:
    ids = await seed_memories(service)
    dsn = settings.database_url
    assert dsn is not None
    admin = await asyncpg.connect(dsn)
    watcher = await asyncpg.connect(dsn)
    try:
        holding = admin.transaction()
        await holding.start()
        # The second cluster's transaction waits for this lock on one of its members.
        await admin.execute(
            "SELECT 1 FROM memsvc.memories WHERE id = $1 FOR UPDATE", ids["pets"][0]
        )
        await kill_when_it_waits_for_a_lock(watcher, CHILD, dsn, what="the run")
        await holding.rollback()
    finally:
        await admin.close()
        await watcher.close()
    assert set(await assert_consistent(service)) == {frozenset(ids["home"])}
    report = await service.maintenance.consolidate(SCOPE)
    assert report.made == 2
    assert set(await assert_consistent(service)) == {frozenset(m) for m in ids.values()}


async def test_forgotten_members_make_their_clusters_go(service: MemoryService) -> None:
    ids = await seed_memories(service)
    await service.maintenance.consolidate(SCOPE)
    await service.policies.set(Scope("acme"), half_life=86_400)
    first = await service.memories.get(ids["home"][0])
    later = first.created_at + timedelta(days=30)
    report = await service.maintenance.forget(now=later, assembly_members=True)
    assert set(report.ids) >= {m for members in ids.values() for m in members}
    again = await service.maintenance.consolidate(SCOPE)
    assert again.dissolved == 3
    assert await clusters(service) == {}
