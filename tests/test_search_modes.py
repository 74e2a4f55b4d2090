"""Search modes: text, hybrid (reciprocal rank fusion), diversity, reranker, bad input."""

from __future__ import annotations

import asyncio
import contextlib
import math
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta

import asyncpg
import numpy as np
import pytest

from memsvc import MemoryService, Scope, Settings
from memsvc.core.errors import MemsvcError, SchemaError, ValidationError
from memsvc.db import migrate
from memsvc.embedding import HashingEmbedder
from memsvc.memories.queries import IDENTIFIER_BONUS, RRF_K
from memsvc.memories.text_terms import TextTerms, hybrid_terms
from memsvc.sync import SyncMemoryService
from memsvc.testing.postgres import TestPostgres, settings_for_tests

MODES = ("vector", "text", "hybrid")


def unit_vectors(count: int, dim: int = 384, seed: int = 11) -> np.ndarray:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(count, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.fixture
async def plain_service(memsvc_settings: Settings) -> AsyncIterator[MemoryService]:
    """A service without an embedder (text queries default to text mode)."""
    async with MemoryService.open(memsvc_settings) as service:
        yield service


def query_for(mode: str, text: str, embedder_vector: Sequence[float]) -> dict[str, object]:
    """Arguments searching ``text`` in ``mode`` (vector mode with the text's embedding)."""
    if mode == "vector":
        return {"query": list(embedder_vector), "mode": "vector"}
    return {"query": text, "mode": mode}


# ------------------------------------------------------------------ defaults


async def test_default_mode_follows_the_query_and_the_embedder(
    service: MemoryService, plain_service: MemoryService, scope: Scope
) -> None:
    vector = unit_vectors(1)[0]
    await service.memories.add(scope, "the kettle is in the kitchen", embedding=vector)

    (by_vector,) = await service.memories.search(scope, vector, k=1)
    assert by_vector.arms == ("vector",) and by_vector.vector_rank == 1
    assert by_vector.text_rank is None and by_vector.score == pytest.approx(1.0, abs=1e-5)

    (hybrid,) = await service.memories.search(scope, "kettle", k=1)  # the service embeds
    assert hybrid.arms == ("vector", "text") and hybrid.text_rank == 1
    assert hybrid.score == pytest.approx(1 / (RRF_K + 1) * 2)

    (text,) = await plain_service.memories.search(scope, "kettle", k=1)  # no embedder
    assert text.arms == ("text",) and text.similarity is None and text.vector_rank is None

    own = await plain_service.memories.search(scope, "kettle", k=1, query_embedding=vector)
    assert own[0].arms == ("vector", "text")  # hybrid with the app's own vector
    assert own[0].similarity == pytest.approx(1.0, abs=1e-5)


# ------------------------------------------------------------------ identifiers

IDENTIFIER_NOTES = {
    "ENG-4312": "we decided to roll back ENG-4312 after the outage",
    "retry_backoff_ms": "set retry_backoff_ms to 250 for the billing worker",
    "v2.3.1": "the regression appeared in v2.3.1 of the client",
    "/etc/app/config.yaml": "the proxy reads /etc/app/config.yaml at start",
    "1.14.2": "pin numpy below 1.14.2 on the old runners",
    "k8s-node-07": "disk pressure on k8s-node-07 again",
}


@pytest.mark.parametrize("mode", ["text", "hybrid"])
async def test_identifiers_are_found_by_text(
    service: MemoryService, scope: Scope, mode: str
) -> None:
    notes = {key: await service.memories.add(scope, note) for key, note in IDENTIFIER_NOTES.items()}
    for i in range(30):
        await service.memories.add(scope, f"routine note {i} about deploys and retries")
    queries = {
        **{key: key for key in IDENTIFIER_NOTES},
        "4312": "ENG-4312",  # the number alone
        "eng 4312": "ENG-4312",  # typed with a space
        "what about ENG-4312?": "ENG-4312",
        "retry_backoff_ms billing": "retry_backoff_ms",
        "node-07": "k8s-node-07",
    }
    for query, key in queries.items():
        hits = await service.memories.search(scope, query, k=3, mode=mode)
        assert hits and hits[0].memory.id == notes[key].id, query
        assert "text" in hits[0].arms


async def test_websearch_syntax_quotes_or_and_minus(
    plain_service: MemoryService, scope: Scope
) -> None:
    memories = plain_service.memories
    a = await memories.add(scope, "the blue kettle boils fast")
    b = await memories.add(scope, "a kettle that is blue and slow")
    c = await memories.add(scope, "the red teapot")
    assert {h.memory.id for h in await memories.search(scope, '"blue kettle"')} == {a.id}
    assert {h.memory.id for h in await memories.search(scope, "kettle -slow")} == {a.id}
    assert {h.memory.id for h in await memories.search(scope, "teapot or slow")} == {b.id, c.id}


def test_a_question_requires_its_rare_tokens_and_ranks_by_every_word() -> None:
    terms = hybrid_terms("what did we decide about ENG-4312?")
    assert terms == TextTerms(
        "ENG-4312", "what or did or we or decide or about or ENG-4312", identifiers=True
    )
    assert hybrid_terms("is retry_backoff_ms set in /etc/app/config.yaml?").required == (
        "retry_backoff_ms /etc/app/config.yaml"
    )
    for rare in ("v2.3.1", "os.path.join", "maxRetries", "bpo-31949", "src/app.py", "x86_64"):
        assert hybrid_terms(f"notes on {rare}").required == rare, rare
    # Plain words and websearch syntax: the query as written, every word required.
    passage = "the deploy of v2.3.1 " + "went fine again " * 4  # a passage, not a question
    plain = ("deploy budget review", "e.g. the U.S. office", passage)
    for written in (*plain, '"blue kettle" 4312', "ENG-4312 -draft", "a1 or b2"):
        assert hybrid_terms(written) == TextTerms(written, written), written


async def test_hybrid_finds_a_token_asked_about_in_a_question(
    plain_service: MemoryService, scope: Scope
) -> None:
    """The question's other words need not be in the memory; they only rank."""
    memories = plain_service.memories
    vectors = unit_vectors(5, seed=5)
    plain = await memories.add(scope, "ENG-4312 rolled back", embedding=vectors[0])
    closer = await memories.add(scope, "ENG-4312 filed by the pager", embedding=vectors[1])
    other = await memories.add(scope, "ENG-4313 filed by the pager", embedding=vectors[2])
    await memories.add(scope, "the outage was filed and closed", embedding=vectors[3])
    question = "when was ENG-4312 filed and closed?"
    assert await memories.search(scope, question, mode="text") == []  # every word required

    hits = await memories.search(scope, question, k=4, query_embedding=vectors[4])
    text_ranked = sorted((h for h in hits if h.text_rank), key=lambda h: h.text_rank or 0)
    assert [h.memory.id for h in text_ranked] == [closer.id, plain.id]
    assert other.id in {h.memory.id for h in hits}  # found by the vector arm only
    assert all(h.arms == ("vector",) for h in hits if h.memory.id not in (plain.id, closer.id))


async def test_a_memory_holding_the_questions_identifiers_outranks_vector_only_hits(
    plain_service: MemoryService, scope: Scope
) -> None:
    """By plain RRF the exact match only ties with the vector arm's unrelated first hit."""
    memories = plain_service.memories
    vectors = unit_vectors(6, seed=9)
    # No embedding: the vector arm cannot find it (embeddings cannot help here).
    ticket = await memories.add(scope, "ENG-4312 was rolled back after the outage")
    for i in range(5):
        await memories.add(scope, f"unrelated note {i}", embedding=vectors[i])
    for question in ("ENG-4312", "what did we decide about ENG-4312?"):
        (first,) = await memories.search(scope, question, k=1, query_embedding=vectors[0])
        assert first.memory.id == ticket.id, question
        hits = await memories.search(scope, question, k=3, query_embedding=vectors[0])
        assert [h.arms for h in hits] == [("text",), ("vector",), ("vector",)]
        assert hits[0].score == pytest.approx(1 / (RRF_K + 1) + IDENTIFIER_BONUS)
        assert hits[1].score == pytest.approx(1 / (RRF_K + 1))  # unrelated, vector rank 1
        recall = await memories.search(
            scope, question, k=3, query_embedding=vectors[0], rank="recall"
        )
        assert recall[0].memory.id == ticket.id  # the bonus is in the score reorders use
    # Plain words and passages fuse as before: no identifier to hold.
    passage = "a long account of the outage and how ENG-4312 was rolled back " + "again " * 8
    hits = await memories.search(scope, passage, k=6, query_embedding=vectors[0])
    assert all(h.score <= 2 / (RRF_K + 1) + 1e-9 for h in hits)


async def test_hybrid_keeps_websearch_syntax(plain_service: MemoryService, scope: Scope) -> None:
    memories = plain_service.memories
    vectors = unit_vectors(4, seed=6)
    a = await memories.add(scope, "the blue kettle boils fast in v2.3.1", embedding=vectors[0])
    b = await memories.add(scope, "a kettle that is blue and slow in v2.3.1", embedding=vectors[1])
    c = await memories.add(scope, "the red teapot", embedding=vectors[2])

    async def text_arm(query: str) -> set[uuid.UUID]:
        hits = await memories.search(scope, query, k=10, query_embedding=vectors[3])
        return {h.memory.id for h in hits if "text" in h.arms}

    assert await text_arm('"blue kettle" v2.3.1') == {a.id}
    assert await text_arm("v2.3.1 -slow") == {a.id}
    assert await text_arm("teapot or slow") == {b.id, c.id}
    assert await text_arm("blue kettle slow") == {b.id}  # no rare token: every word required


# ------------------------------------------------------------------ fusion


async def test_reciprocal_rank_fusion_orders_by_summed_reciprocal_ranks(
    service: MemoryService, scope: Scope
) -> None:
    axes = np.eye(384, dtype=np.float32)
    query = axes[0]

    # Vector ranks by construction: nearer to axis 0 = better.
    def toward(weight: float) -> np.ndarray:
        v = weight * axes[0] + (1 - weight) * axes[1]
        return v / np.linalg.norm(v)

    both = await service.memories.add(scope, "zephyr zephyr report", embedding=toward(0.8))
    vector_only = await service.memories.add(scope, "unrelated words", embedding=toward(0.99))
    text_only = await service.memories.add(scope, "zephyr zephyr zephyr", embedding=axes[2])
    weak = await service.memories.add(scope, "zephyr once", embedding=toward(0.3))

    hits = await service.memories.search(scope, "zephyr", k=4, query_embedding=query)
    by_id = {h.memory.id: h for h in hits}
    for hit in hits:
        expected = sum(1 / (RRF_K + r) for r in (hit.vector_rank, hit.text_rank) if r)
        assert hit.score == pytest.approx(expected)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert by_id[vector_only.id].vector_rank == 1 and by_id[vector_only.id].text_rank is None
    assert by_id[text_only.id].text_rank == 1
    assert by_id[both.id].arms == ("vector", "text")
    assert hits[0].memory.id == both.id  # found by both arms beats rank 1 in one arm
    assert by_id[weak.id].arms == ("vector", "text")


# ------------------------------------------------------------------ filters, scopes, TTL


@pytest.mark.parametrize("mode", MODES)
async def test_every_mode_applies_scope_filters_and_ttl(
    service: MemoryService, settings: Settings, scope: Scope, mode: str
) -> None:
    embed = HashingEmbedder()
    memories = service.memories
    text = "quarterly budget review notes"
    (query_vector,) = await embed([text])
    keep = await memories.add(scope, text, metadata={"kind": "note"}, importance=0.9)
    await memories.add(scope, text + " draft", metadata={"kind": "draft"}, importance=0.9)
    await memories.add(scope, text + " minor", metadata={"kind": "note"}, importance=0.1)
    await memories.add(scope, text + " expired", metadata={"kind": "note"}, ttl=0.001)
    sibling = scope.with_session("other")
    await memories.add(sibling, text + " sibling", metadata={"kind": "note"}, importance=0.9)
    parent = Scope(scope.tenant, scope.project)
    above = await memories.add(parent, text + " project", metadata={"kind": "note"})
    await asyncio.sleep(0.01)

    args = query_for(mode, text, query_vector)
    filters = {"where": {"kind": "note"}, "min_importance": 0.5}
    hits = await memories.search(scope, k=10, **filters, **args)  # type: ignore[arg-type]
    assert [h.memory.id for h in hits] == [keep.id]

    hits = await memories.search(scope, k=10, include="ancestors", where={"kind": "note"}, **args)  # type: ignore[arg-type]
    ids = {h.memory.id for h in hits}
    assert above.id in ids and keep.id in ids
    assert all(h.memory.scope in (scope, parent) for h in hits)
    assert not any("expired" in h.memory.content for h in hits)

    later = datetime.now(UTC) + timedelta(hours=1)
    assert await memories.search(scope, k=10, created_after=later, **args) == []  # type: ignore[arg-type]
    before = await memories.search(scope, k=10, created_before=later, **args)  # type: ignore[arg-type]
    assert len(before) == 3  # keep, draft, minor (expired is gone, siblings out of scope)


@pytest.mark.parametrize("mode", MODES)
async def test_filtered_search_returns_full_pages_in_every_mode(
    service: MemoryService, mode: str
) -> None:
    """2,000 rows, 12 pass the filter, far from the query vector: still k=10 hits."""
    big = Scope("t", "big")
    vectors = unit_vectors(2000, seed=3)
    items = [
        {
            "content": f"ledger entry {i} reconciled" if i % 160 == 0 else f"entry {i} pending",
            "embedding": vectors[i],
            "metadata": {"rare": i % 160 == 0 or i % 167 == 0},
        }
        for i in range(2000)
    ]
    await service.memories.add_many(big, items)
    async with service.pool.acquire() as conn:
        await conn.execute("ANALYZE memsvc.memories")
    text = "ledger reconciled"
    if mode == "vector":
        args: dict[str, object] = {"query": vectors[1], "mode": "vector"}
        matching = 24  # multiples of 160 (13) or of 167 (12), 0 counted once
    elif mode == "text":
        args = {"query": text, "mode": "text"}
        matching = 13  # the multiples of 160: the words, and the flag
    else:
        args = {"query": text, "mode": "hybrid", "query_embedding": vectors[1]}
        matching = 24  # every flagged row has an embedding
    hits = await service.memories.search(big, k=10, where={"rare": True}, **args)  # type: ignore[arg-type]
    assert len(hits) == min(10, matching)
    assert all(h.memory.metadata["rare"] for h in hits)
    wide = await service.memories.search(big, k=100, where={"rare": True}, **args)  # type: ignore[arg-type]
    assert len(wide) == matching


# ------------------------------------------------------------------ diversity


async def test_diversity_trades_near_duplicates_for_other_relevant_memories(
    service: MemoryService, scope: Scope
) -> None:
    base, other, noise = unit_vectors(3, seed=5)
    rng = np.random.default_rng(1)
    twins = []
    for i in range(4):
        v = base + 0.01 * rng.normal(size=384)
        twins.append(await service.memories.add(scope, f"twin {i}", embedding=v))
    query = 0.8 * base + 0.6 * other
    distinct = await service.memories.add(scope, "distinct", embedding=other)
    await service.memories.add(scope, "noise", embedding=noise)

    plain = await service.memories.search(scope, query, k=2)
    assert {h.memory.id for h in plain} <= {t.id for t in twins}
    same = await service.memories.search(scope, query, k=2, diversity=0)
    assert [h.memory.id for h in same] == [h.memory.id for h in plain]
    varied = await service.memories.search(scope, query, k=2, diversity=0.6)
    assert varied[0].memory.id == plain[0].memory.id  # the most relevant stays first
    assert varied[1].memory.id == distinct.id


# ------------------------------------------------------------------ reranker


async def test_reranker_reorders_the_fused_candidates(
    memsvc_settings: Settings, scope: Scope
) -> None:
    calls: list[tuple[str, list[str]]] = []

    async def prefer_long(query: str, contents: list[str]) -> list[float]:
        calls.append((query, contents))
        return [float(len(c)) for c in contents]

    async with MemoryService.open(
        memsvc_settings, embedder=HashingEmbedder(), reranker=prefer_long
    ) as service:
        for content in ("tea", "tea with milk", "tea with milk and honey", "coffee"):
            await service.memories.add(scope, content)
        hits = await service.memories.search(scope, "tea", k=2)
        assert [h.memory.content for h in hits] == ["tea with milk and honey", "tea with milk"]
        assert [h.score for h in hits] == [23.0, 13.0]
        assert calls[0][0] == "tea" and len(calls[0][1]) >= 3  # candidates, not just k
        vector = (await HashingEmbedder()(["tea"]))[0]
        calls.clear()
        await service.memories.search(scope, vector, k=2)
        assert calls == []  # no query text: nothing to rerank against


@pytest.mark.parametrize(
    ("scores", "message"),
    [(lambda n: [1.0] * (n + 1), "scores for"), (lambda n: [math.nan] * n, "finite")],
)
async def test_a_bad_reranker_is_a_clear_error(
    memsvc_settings: Settings, scope: Scope, scores: Callable[[int], list[float]], message: str
) -> None:
    async def broken(query: str, contents: list[str]) -> list[float]:
        return list(scores(len(contents)))

    async with MemoryService.open(memsvc_settings, reranker=broken) as service:
        await service.memories.add(scope, "tea with milk")
        with pytest.raises(MemsvcError, match=message):
            await service.memories.search(scope, "tea", k=2)


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize("query", ["", "   \n\t", "-", "the of and", "!!!"])
@pytest.mark.parametrize("mode", ["text", "hybrid"])
async def test_queries_without_searchable_words_are_refused(
    service: MemoryService, scope: Scope, query: str, mode: str
) -> None:
    await service.memories.add(scope, "the of and - !!!")
    with pytest.raises(ValidationError) as caught:
        await service.memories.search(scope, query, mode=mode)  # type: ignore[arg-type]
    assert caught.value.field == "query"


@contextlib.asynccontextmanager
async def counted_text_search(
    service: MemoryService, scope: Scope
) -> AsyncIterator[tuple[Callable[[str], Awaitable[list[object]]], list[str]]]:
    """A text search on one connection, and the statements its last call sent."""
    statements: list[str] = []
    async with service.pool.acquire() as conn:
        conn.add_query_logger(lambda record: statements.append(record.query))

        async def search(query: str) -> list[object]:
            statements.clear()
            try:
                return list(await service.memories.search(scope, query, mode="text", conn=conn))
            finally:
                # asyncpg calls query loggers soon after, not during, the call.
                for _ in range(3):
                    await asyncio.sleep(0)

        yield search, statements


async def test_text_mode_learns_searchable_words_and_still_refuses_empty_queries(
    service: MemoryService, scope: Scope
) -> None:
    await service.memories.add(scope, "kettle descaled on friday")
    async with counted_text_search(service, scope) as (search, statements):
        # No match: the server says whether the query had searchable words.
        assert await search("zeppelin ENG 4312") == []
        assert len(statements) == 2
        # A query holding a word found searchable needs no second question...
        assert await search("the zeppelin") == []
        assert len(statements) == 1
        assert await search('"flight plan" 4312 -kettle or the') == []
        assert len(statements) == 1
        # ...and one with none still asks, and is still refused.
        for query in ("the of and", "-", "or", "zeppelin-the"):
            statements.clear()
            if query == "zeppelin-the":
                # "-" inside a word reads as a space: "zeppelin the", searchable.
                assert await search(query) == []
                continue
            with pytest.raises(ValidationError) as caught:
                await search(query)
            assert caught.value.field == "query"
            assert len(statements) == 2
        # Matches never ask.
        assert len(await search("kettle")) == 1
        assert len(statements) == 1


async def test_a_question_mark_or_comma_after_a_known_word_needs_no_second_question(
    service: MemoryService, scope: Scope
) -> None:
    await service.memories.add(scope, "kettle descaled on friday")
    async with counted_text_search(service, scope) as (search, statements):
        # "work?" is the word "work" to the server, and so to what memsvc learns.
        assert await search("does the zeppelin work?") == []
        assert len(statements) == 2
        for query in ("how does omp_init_allocator work?", "zeppelin, again!", "why: zeppelin;"):
            assert await search(query) == []
            assert len(statements) == 1, query
        # Stop words stay stop words, punctuation or not: asked, and refused.
        for query in ("what does it do?", "or?", "the, of: and!"):
            with pytest.raises(ValidationError) as caught:
                await search(query)
            assert caught.value.field == "query"
            assert len(statements) == 2, query
        assert len(await search("kettle?")) == 1


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"mode": "auto"}, "mode"),
        ({"mode": "semantic"}, "mode"),
        ({"plan": "fast"}, "plan"),
        ({"diversity": -0.1}, "diversity"),
        ({"diversity": 1.5}, "diversity"),
        ({"diversity": True}, "diversity"),
        ({"diversity": "0.5"}, "diversity"),
        ({"query_embedding": [0.1] * 3}, "query_embedding"),
    ],
)
async def test_bad_search_arguments_name_their_field(
    service: MemoryService, scope: Scope, kwargs: dict[str, object], field: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        await service.memories.search(scope, "kettle", **kwargs)  # type: ignore[arg-type]
    assert caught.value.field == field


async def test_hybrid_without_any_vector_is_a_mode_error(
    plain_service: MemoryService, scope: Scope
) -> None:
    with pytest.raises(ValidationError) as caught:
        await plain_service.memories.search(scope, "kettle", mode="hybrid")
    assert caught.value.field == "mode"
    vector = unit_vectors(1)[0]
    for mode in ("text", "hybrid"):
        with pytest.raises(ValidationError) as caught:
            await plain_service.memories.search(scope, vector, mode=mode)  # type: ignore[arg-type]
        assert caught.value.field == "mode"


# ------------------------------------------------------------------ other surfaces


def test_sync_client_searches_in_every_mode(memsvc_settings: Settings, scope: Scope) -> None:
    with SyncMemoryService.open(memsvc_settings, embedder=HashingEmbedder()) as svc:
        memory = svc.memories.add(scope, "release train leaves on ENG-77")
        svc.memories.add(scope, "lunch is at noon")
        for mode in ("text", "hybrid"):
            hits = svc.memories.search(scope, "ENG-77", k=1, mode=mode)
            assert hits[0].memory.id == memory.id and "text" in hits[0].arms
        hits = svc.memories.search(scope, "release train", k=1, mode="vector", diversity=0.5)
        assert hits[0].arms == ("vector",)


async def test_assemblies_take_plan_and_only_the_vector_mode(
    service: MemoryService, scope: Scope
) -> None:
    vector = unit_vectors(1)[0]
    memory = await service.memories.add(scope, "a", embedding=vector)
    group = await service.assemblies.create(scope, "g", memory_ids=[memory.id])
    for plan in ("auto", "exact", "index"):
        hits = await service.assemblies.search(scope, vector, plan=plan, mode="vector")
        assert [h.assembly.id for h in hits] == [group.id]
    for mode in ("text", "hybrid", "exact"):
        with pytest.raises(ValidationError) as caught:
            await service.assemblies.search(scope, vector, mode=mode)  # type: ignore[arg-type]
        assert caught.value.field == "mode"


async def test_explain_search_shows_each_modes_arms(service: MemoryService, scope: Scope) -> None:
    await service.memories.add(scope, "kettle notes")
    text_plan = await service.memories.explain_search(scope, "kettle", mode="text")
    assert "content_tsv" in text_plan and "<=>" not in text_plan
    hybrid_plan = await service.memories.explain_search(scope, "kettle", mode="hybrid")
    assert "content_tsv" in hybrid_plan and "<=>" in hybrid_plan
    exact_plan = await service.memories.explain_search(scope, "kettle", mode="vector", plan="exact")
    assert "content_tsv" not in exact_plan and "<=>" in exact_plan


# ------------------------------------------------------------------ migration


@pytest.fixture
async def empty_database(memsvc_postgres: TestPostgres) -> AsyncIterator[str]:
    name = f"memsvc_t_{uuid.uuid4().hex[:10]}"
    dsn = await memsvc_postgres.create_database(name)
    yield dsn
    await memsvc_postgres.drop_database(name)


async def test_0009_adds_and_removes_the_text_column_and_other_configs_are_refused(
    empty_database: str,
) -> None:
    settings = settings_for_tests(empty_database)
    await asyncio.to_thread(migrate.upgrade, settings, empty_database, "0008")
    conn = await asyncpg.connect(empty_database)
    try:
        await conn.execute(
            "INSERT INTO memsvc.memories (tenant_id, id, content, content_hash) "
            "VALUES ('t', gen_random_uuid(), 'written before ENG-9 existed', 'sha256:x')"
        )
        column = "SELECT count(*) FROM pg_attribute WHERE attrelid = 'memsvc.memories'::regclass "
        column += "AND attname = 'content_tsv' AND NOT attisdropped"
        assert await conn.fetchval(column) == 0
        # To head (0009 and what follows it): open() below wants the current schema.
        await asyncio.to_thread(migrate.upgrade, settings, empty_database, "head")
        assert await conn.fetchval(column) == 1
        # Rows written before the migration are searchable: the column is computed.
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM memsvc.memories WHERE content_tsv @@ "
                "websearch_to_tsquery('english', 'ENG-9')"
            )
            == 1
        )
        recorded = "SELECT value FROM memsvc.schema_info WHERE key = 'text_search_config'"
        assert await conn.fetchval(recorded) == "english"
        simple = settings_for_tests(empty_database, text_search_config="simple")
        with pytest.raises(SchemaError, match="text_search_config"):
            await MemoryService.open(simple)
        await asyncio.to_thread(migrate.downgrade, settings, empty_database, "0008")
        assert await conn.fetchval(column) == 0
        assert await conn.fetchval(recorded) is None
        # Changing the configuration: migrate the column again under the new setting.
        await asyncio.to_thread(migrate.upgrade, simple, empty_database, "head")
        assert await conn.fetchval(recorded) == "simple"
        async with MemoryService.open(simple) as service:
            # 'simple' keeps stop words: "before" is a searchable word now.
            hits = await service.memories.search(Scope("t"), "before", mode="text")
            assert len(hits) == 1
    finally:
        await conn.close()
