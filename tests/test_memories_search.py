"""Vector search: scopes, filters, full pages, index use, ranking."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from memsvc import MemoryService, Scope, Settings, ValidationError
from memsvc.core.models import Memory, SearchHit
from memsvc.db.partition_queries import name_partition_indexes
from memsvc.db.sql import Params, scope_condition
from memsvc.embedding import HashingEmbedder
from memsvc.memories.embedding_space import EmbeddingSpace
from memsvc.memories.search_plan import SearchPlanner, scope_values
from memsvc.testing.postgres import settings_for_tests


def unit_vectors(count: int, dim: int = 384, seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(count, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


async def test_nearest_memory_comes_first(service: MemoryService, scope: Scope) -> None:
    vectors = unit_vectors(50)
    stored = await service.memories.add_many(
        scope, [{"content": f"m{i}", "embedding": v} for i, v in enumerate(vectors)]
    )
    hits = await service.memories.search(scope, vectors[17], k=5)
    assert hits[0].memory.id == stored[17].id
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


async def test_text_query_uses_the_embedder(service: MemoryService, scope: Scope) -> None:
    await service.memories.add(scope, "the user prefers metric units")
    await service.memories.add(scope, "deploys happen on tuesdays")
    hits = await service.memories.search(scope, "which units does the user prefer", k=1)
    assert hits[0].memory.content == "the user prefers metric units"


async def test_scopes_see_their_own_path_only(service: MemoryService) -> None:
    tenant = Scope("acme")
    project = Scope("acme", "bridge")
    session = Scope("acme", "bridge", "planner", "s1")
    sibling = Scope("acme", "bridge", "planner", "s2")
    other_tenant = Scope("globex", "bridge", "planner", "s1")
    for where in (tenant, project, session, sibling, other_tenant):
        await service.memories.add(where, f"fact of {where.as_dict()}")

    def owners(hits: list) -> set[Scope]:
        return {h.memory.scope for h in hits}

    query = "fact"
    assert owners(await service.memories.search(session, query, k=10)) == {session}
    assert owners(await service.memories.search(session, query, k=10, include="ancestors")) == {
        session,
        project,
        tenant,
    }
    assert owners(await service.memories.search(project, query, k=10, include="descendants")) == {
        project,
        session,
        sibling,
    }
    assert owners(
        await service.memories.search(other_tenant, query, k=10, include="ancestors")
    ) == {other_tenant}


async def test_metadata_filters(service: MemoryService, scope: Scope) -> None:
    rows = [
        {"kind": "pref", "n": 1, "tags": ["a"]},
        {"kind": "pref", "n": 10},
        {"kind": "fact", "n": 2.5},
        {"kind": "fact", "n": "10"},
        {"other": True},
    ]
    for i, metadata in enumerate(rows):
        await service.memories.add(scope, f"row {i}", metadata=metadata)

    async def contents(where: dict) -> set[str]:
        hits = await service.memories.search(scope, "row", k=10, where=where)
        return {h.memory.content for h in hits}

    assert await contents({"kind": "pref"}) == {"row 0", "row 1"}
    assert await contents({"kind": {"$ne": "pref"}}) == {"row 2", "row 3", "row 4"}
    assert await contents({"kind": {"$in": ["fact", "none"]}}) == {"row 2", "row 3"}
    assert await contents({"kind": {"$nin": ["fact"]}}) == {"row 0", "row 1", "row 4"}
    # numbers compare as numbers (10 > 9, and 2.5 counts), strings never match
    assert await contents({"n": {"$gt": 2}}) == {"row 1", "row 2"}
    assert await contents({"n": {"$gte": 1, "$lt": 10}}) == {"row 0", "row 2"}
    assert await contents({"other": {"$exists": True}}) == {"row 4"}
    assert await contents({"tags": ["a"]}) == {"row 0"}
    assert await contents({"kind": "pref", "n": 10}) == {"row 1"}


async def test_min_importance_and_created_window(service: MemoryService, scope: Scope) -> None:
    await service.memories.add(scope, "low", importance=0.1)
    high = await service.memories.add(scope, "high", importance=0.9)
    hits = await service.memories.search(scope, "x", k=10, min_importance=0.5)
    assert [h.memory.id for h in hits] == [high.id]
    future = datetime.now(UTC) + timedelta(hours=1)
    assert await service.memories.search(scope, "x", k=10, created_after=future) == []
    assert len(await service.memories.search(scope, "x", k=10, created_before=future)) == 2


async def test_rank_recall_blends_importance(service: MemoryService, scope: Scope) -> None:
    vector = unit_vectors(1)[0]
    near = vector + 0.05 * unit_vectors(1, seed=3)[0]
    await service.memories.add(scope, "similar but trivial", embedding=vector, importance=0.0)
    important = await service.memories.add(
        scope, "a bit less similar, vital", embedding=near, importance=1.0
    )
    by_similarity = await service.memories.search(scope, vector, k=2)
    by_recall = await service.memories.search(scope, vector, k=2, rank="recall")
    assert by_similarity[0].memory.id != important.id
    assert by_recall[0].memory.id == important.id
    assert by_recall[0].score > by_recall[1].score


async def load_without_index(service: MemoryService, scope: Scope, items: list[dict]) -> None:
    """Bulk load: drop the HNSW index, insert, rebuild it from its own definition.

    Keeping HNSW exact on every insert runs at a few hundred rows per second
    on a small machine; building it once afterwards is an order faster.
    """
    async with service.pool.acquire() as conn:
        definition = await conn.fetchval(
            "SELECT pg_get_indexdef('memsvc.ix_memories_embedding_hnsw'::regclass)"
        )
        await conn.execute("DROP INDEX memsvc.ix_memories_embedding_hnsw")
        await service.memories.add_many(scope, items, conn=conn)
        # A partitioned table's index definition reads ON ONLY (the parent
        # alone); built in one transaction here, it is declared for every
        # partition, whose indexes then get memsvc's names (nothing unpartitioned).
        await conn.execute(definition.replace(" ON ONLY ", " ON "))
        await conn.execute(name_partition_indexes("memsvc"))
        await conn.execute("ANALYZE memsvc.memories")


@pytest.fixture
async def large_scope(memsvc_database_url: str) -> tuple[MemoryService, np.ndarray]:
    """8,000 rows in one scope (where the index pays) plus a small scope of 50."""
    settings: Settings = settings_for_tests(memsvc_database_url, hnsw_max_scan_tuples=400)
    service = await MemoryService.open(settings)
    vectors = unit_vectors(8050)
    items = [
        {"content": f"b{i}", "embedding": v, "metadata": {"rare": i % 200 == 0}}
        for i, v in enumerate(vectors[:8000])
    ]
    await load_without_index(service, Scope("t", "big"), items)
    await service.memories.add_many(
        Scope("t", "small"),
        [{"content": f"s{i}", "embedding": v} for i, v in enumerate(vectors[8000:])],
    )
    yield service, vectors  # type: ignore[misc]
    await service.close()


def _executed(plan: str, needle: str) -> bool:
    """Whether a plan node matching ``needle`` ran (absent or "never executed": no)."""
    lines = [line for line in plan.splitlines() if needle in line]
    return any("never executed" not in line for line in lines)


async def test_large_scopes_use_the_hnsw_index_and_small_ones_scan_exactly(
    large_scope: tuple[MemoryService, np.ndarray],
) -> None:
    service, vectors = large_scope
    hnsw = "Index Scan using ix_memories_embedding_hnsw"
    big_plan = await service.memories.explain_search(Scope("t", "big"), vectors[3], k=10)
    small_plan = await service.memories.explain_search(Scope("t", "small"), vectors[8010], k=10)
    assert _executed(big_plan, hnsw), big_plan
    assert not _executed(small_plan, hnsw), small_plan
    hits = await service.memories.search(Scope("t", "big"), vectors[3], k=10)
    assert hits[0].memory.content == "b3"
    small_hits = await service.memories.search(Scope("t", "small"), vectors[8010], k=10)
    assert small_hits[0].memory.content == "s10"


async def test_validity_filters_keep_the_hnsw_plan(
    large_scope: tuple[MemoryService, np.ndarray],
) -> None:
    # valid="now" (the default), valid_at and valid="all" are filters the
    # index scan applies as it goes: the large scope still walks the index.
    from datetime import UTC, datetime

    service, vectors = large_scope
    hnsw = "Index Scan using ix_memories_embedding_hnsw"
    for options in ({"valid": "now"}, {"valid": "all"}, {"valid_at": datetime.now(UTC)}):
        plan = await service.memories.explain_search(
            Scope("t", "big"), vectors[3], k=10, **options  # type: ignore[arg-type]
        )
        assert _executed(plan, hnsw), (options, plan)
        hits = await service.memories.search(
            Scope("t", "big"), vectors[3], k=10, **options  # type: ignore[arg-type]
        )
        assert hits[0].memory.content == "b3" and len(hits) == 10


async def test_selective_filter_on_a_large_scope_still_returns_a_full_page(
    large_scope: tuple[MemoryService, np.ndarray],
) -> None:
    service, vectors = large_scope
    big = Scope("t", "big")
    # 40 rows match; an HNSW scan stopping after 400 tuples (the settings)
    # would find about 2 of them. Whatever plan runs, the page must be full.
    hits = await service.memories.search(big, vectors[1], k=10, where={"rare": True})
    assert len(hits) == 10
    assert all(h.memory.metadata["rare"] for h in hits)
    exact = await service.memories.search(
        big, vectors[1], k=10, where={"rare": True}, plan="exact"
    )
    assert [h.memory.id for h in hits] == [h.memory.id for h in exact]


async def test_search_returns_embeddings_only_when_asked(
    service: MemoryService, scope: Scope
) -> None:
    vector = [1.0] + [0.0] * 383
    stored = await service.memories.add(scope, "the one with a vector", embedding=vector)
    (plain,) = await service.memories.search(scope, vector, k=1)
    assert plain.memory.id == stored.id and plain.memory.embedding is None
    assert plain.memory.content == stored.content and plain.memory.metadata == stored.metadata
    for plan in ("auto", "exact", "index"):
        (full,) = await service.memories.search(
            scope, vector, k=1, plan=plan, with_embeddings=True
        )
        assert full.memory.embedding == stored.embedding
    # The text and hybrid statements follow the same rule.
    for mode in ("text", "hybrid"):
        (plain,) = await service.memories.search(scope, "vector", k=1, mode=mode)
        assert plain.memory.id == stored.id and plain.memory.embedding is None
        (full,) = await service.memories.search(
            scope, "vector", k=1, mode=mode, with_embeddings=True
        )
        assert full.memory.embedding == stored.embedding
    with pytest.raises(ValidationError) as caught:
        await service.memories.search(scope, vector, with_embeddings="yes")  # type: ignore[arg-type]
    assert caught.value.field == "with_embeddings"


async def test_statements_reused_by_shape_give_each_call_its_own_answer(
    service: MemoryService,
) -> None:
    """Searches of many shapes, each twice, in one repository (its statements are cached)."""
    project = Scope("acme", "cache")
    session = Scope("acme", "cache", "agent", "s1")
    vectors = unit_vectors(24, seed=11)
    for i, vector in enumerate(vectors):
        where = session if i % 2 else project
        await service.memories.add(
            where, f"m{i}", embedding=vector, metadata={"b": i % 3}, importance=i / 24
        )

    def expected(i: int, scopes: set[Scope], b: int | None, floor: float | None) -> list[str]:
        rows = [
            (float(vectors[j] @ vectors[i]), f"m{j}")
            for j in range(24)
            if (session if j % 2 else project) in scopes
            and (b is None or j % 3 == b)
            and (floor is None or j / 24 >= floor)
        ]
        return [content for _, content in sorted(rows, reverse=True)[:3]]

    shapes = [
        (project, "exact", {project}),
        (session, "exact", {session}),
        (session, "ancestors", {session, project}),
        (project, "descendants", {session, project}),
    ]
    for _ in range(2):
        for i, (scope, include, scopes) in enumerate(shapes):
            for b in (None, 0, 1):
                for floor in (None, 0.5):
                    for plan in ("auto", "exact"):
                        hits = await service.memories.search(
                            scope,
                            vectors[i],
                            k=3,
                            include=include,  # type: ignore[arg-type]
                            where=None if b is None else {"b": b},
                            min_importance=floor,
                            plan=plan,  # type: ignore[arg-type]
                        )
                        assert [h.memory.content for h in hits] == expected(
                            i, scopes, b, floor
                        ), (scope, include, b, floor, plan)
                        assert all(h.memory.scope in scopes for h in hits)


async def test_hits_and_memories_read_back_equal_ones_built_by_their_constructors(
    service: MemoryService, scope: Scope
) -> None:
    # Rows fill Memory and SearchHit without __init__ (for speed): every
    # field must be there, with the value __init__ would have been given.
    stored = await service.memories.add(
        scope, "the deploy runs at noon", embedding=[1.0] + [0.0] * 383, metadata={"a": 1}
    )
    [hit] = await service.memories.search(
        scope, [1.0] + [0.0] * 383, k=1, with_embeddings=True
    )
    fields = [f.name for f in dataclasses.fields(Memory)]
    assert hit.memory == Memory(**{name: getattr(stored, name) for name in fields})
    assert hit == SearchHit(hit.memory, hit.score, hit.score, ("vector",), 1, None)
    assert sorted(vars(hit.memory)) == sorted(fields)
    with pytest.raises(dataclasses.FrozenInstanceError):
        hit.memory.content = "changed"  # type: ignore[misc]
    assert hash(hit.memory.scope) == hash(scope)


async def test_searches_of_one_shape_share_one_statement_and_check_every_argument(
    service: MemoryService, scope: Scope
) -> None:
    # A search's statement is built once per shape (mode, include, which
    # scope levels are set, filters, plan, ...) and reused by every search of
    # that shape: whatever the scope's ids, the query or its type, each
    # argument must still be checked, and each scope must get its own rows.
    sibling = Scope(scope.tenant, scope.project, scope.agent, "s-43")
    mine = await service.memories.add(scope, "kept in the first session")
    theirs = await service.memories.add(sibling, "kept in the second session")
    query = np.asarray((await service.embedder(["kept in a session"]))[0], dtype=np.float32)
    statements = service.memories._planner.statements
    built = []  # statements built after each round
    for _ in range(2):  # the second round runs on statements built in the first
        for where, memory in ((scope, mine), (sibling, theirs)):
            hits = await service.memories.search(where, query, k=5)
            assert [hit.memory.id for hit in hits] == [memory.id]
            assert hits[0].memory.scope == where
            # A list query, of another type, takes the same path and statement.
            (general,) = await service.memories.search(where, query.tolist(), k=5)
            assert general.memory.id == memory.id
            assert math.isclose(general.similarity or 0, hits[0].similarity or 0, abs_tol=1e-6)
        descendants = await service.memories.search(
            Scope(scope.tenant), query, k=5, include="descendants"
        )
        assert {hit.memory.id for hit in descendants} == {mine.id, theirs.id}
        built.append(statements.cache_info())
    # Two shapes (a full session scope, exact; a tenant, descendants): two
    # statements built, both sessions sharing one; the second round builds none.
    first, second = built
    assert first.misses == 2 and first.hits == 3
    assert second.misses == 2 and second.hits == 3 + 5
    same = [
        await service.memories._planner.plan(
            where, query, 5, "exact", None, None, None, None, "similarity", None, None, None,
            "auto", False,
        )
        for where in (scope, sibling)
    ]  # fmt: skip
    assert same[0].statement is same[1].statement
    assert same[0].values != same[1].values and sibling.session in same[1].values
    assert sibling.session not in same[1].statement.sql
    # Embeddings asked for: a shape of its own, which explain_search shares.
    (with_vector,) = await service.memories.search(scope, query, k=5, with_embeddings=True)
    assert with_vector.memory.embedding is not None and with_vector.memory.id == mine.id
    (plain,) = await service.memories.search(scope, query, k=5)
    assert plain.memory.embedding is None
    assert "Limit" in await service.memories.explain_search(scope, query, k=5)
    assert statements.cache_info().misses == 3
    bad_calls = [
        ("k", {"k": True}),  # equal to k=1 as a key, but not an int
        ("k", {"k": 0}),
        ("k", {"k": 1.0}),
        ("include", {"include": "everything"}),
        ("plan", {"plan": "fastest"}),
        ("query", {"query": np.full(384, math.nan, dtype=np.float32)}),
        ("query", {"query": np.zeros(384, dtype=np.float32)}),
        ("query", {"query": np.full(383, 0.5, dtype=np.float32)}),
        ("scope", {"scope": {"tenant": scope.tenant}}),
    ]
    await service.memories.search(scope, query, k=1)
    for field, change in bad_calls:
        arguments = {"scope": scope, "query": query, "k": 1, **change}
        target = arguments.pop("scope")
        vector = arguments.pop("query")
        with pytest.raises(ValidationError) as refused:
            await service.memories.search(target, vector, **arguments)
        assert refused.value.field == field, change
    # A float32 array that is not native (big-endian) takes the full check.
    (hit,) = await service.memories.search(scope, query.astype(">f4"), k=1)
    assert hit.memory.id == mine.id


async def test_a_search_checks_every_argument_before_calling_the_embedder(
    memsvc_settings: Settings,
) -> None:
    # A text query is embedded only once every argument has passed: a bad
    # filter costs no embedder call (a paid API, in production).
    calls: list[list[str]] = []
    hashing = HashingEmbedder()

    async def counting(texts: Sequence[str]) -> list[np.ndarray]:
        calls.append(list(texts))
        return await hashing(texts)

    async with MemoryService.open(memsvc_settings, embedder=counting) as service:
        scope = Scope("acme", "bridge")
        kettle = hashing.embed_one("kettle")
        await service.memories.add(scope, "the kettle was descaled", embedding=kettle)
        bad = [
            ("where.$or", {"where": {"$or": []}}),
            ("where.n.$gt", {"where": {"n": {"$gt": "two"}}}),
            ("min_importance", {"min_importance": 2.0}),
            ("created_after", {"created_after": datetime(2024, 1, 1)}),
        ]
        for field, arguments in bad:
            with pytest.raises(ValidationError) as refused:
                await service.memories.search(
                    scope, "what about the kettle?", **arguments  # type: ignore[arg-type]
                )
            assert refused.value.field == field
        assert calls == []
        (hit,) = await service.memories.search(scope, "what about the kettle?")
        assert calls == [["what about the kettle?"]] and hit.memory.content.startswith("the kettle")


SCOPE_SHAPES = [
    Scope("t", project, agent, session)
    for project in (None, "p")
    for agent in (None, "a")
    for session in (None, "s")
]


@pytest.mark.parametrize("include", ["exact", "ancestors", "descendants"])
@pytest.mark.parametrize("scope", SCOPE_SHAPES, ids=lambda s: "/".join(map(str, s.levels)))
def test_search_values_are_bound_in_the_order_the_scope_condition_numbers_them(
    scope: Scope, include: str
) -> None:
    # The statement's scope text comes from scope_condition once per shape;
    # each call binds the scope's values without it, in the same order.
    params = Params()
    scope_condition(scope, include, params)  # type: ignore[arg-type]
    assert scope_values(scope, include) == params.values


@pytest.mark.parametrize("mode", ["vector", "text", "hybrid"])
@pytest.mark.parametrize("include", ["exact", "ancestors", "descendants"])
@pytest.mark.parametrize("scope", SCOPE_SHAPES, ids=lambda s: "/".join(map(str, s.levels)))
async def test_every_placeholder_of_a_shape_has_its_value(
    scope: Scope, include: str, mode: str
) -> None:
    # Values bound per call, statement built per shape: each statement (and
    # its exact fallback) numbers exactly the values the call binds, under
    # every combination of optional filters and text-arm splits.
    settings = Settings(database_url="postgresql://unused")
    planner = SearchPlanner(settings, EmbeddingSpace(settings, None), reranks=False)
    vector = unit_vectors(1)[0]
    texts = {"vector": None, "text": "kettle", "hybrid": "what about ENG-4312 today?"}
    moment = datetime(2024, 1, 1, tzinfo=UTC)
    for where, floor, after, before in [
        (None, None, None, None),
        ({"b": 1, "tag": {"$in": ["x", "y"]}}, 0.5, moment, moment + timedelta(days=1)),
        ({"n": {"$gt": 2}}, None, moment, None),
    ]:
        planned = await planner.plan(
            scope,
            vector if mode == "vector" else texts[mode],  # type: ignore[arg-type]
            3,
            include,  # type: ignore[arg-type]
            where,
            floor,
            after,
            before,
            "similarity",
            mode,  # type: ignore[arg-type]
            None if mode != "hybrid" else vector,
            None,
            "auto",
            False,
        )
        expected = set(range(1, len(planned.values) + 1))
        for sql in (planned.statement.sql, planned.statement.exact_sql):
            if sql is not None:
                assert {int(n) for n in re.findall(r"\$(\d+)", sql)} == expected, sql
