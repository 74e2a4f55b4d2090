"""MemsvcVectorStore beyond LangChain's standard tests: filters, threads, clients, errors."""

from __future__ import annotations

import asyncio
import math
import random
import threading
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from langchain_core.vectorstores import InMemoryVectorStore

from memsvc import MemoryService, MemsvcError, Scope, Settings, ValidationError
from memsvc.db import migrate
from memsvc.integrations.langchain import MemsvcVectorStore
from memsvc.sync import SyncMemoryService
from memsvc.testing.postgres import TestPostgres, settings_for_tests
from tests.integrations.conftest import SMALL_DIM, LoopThread
from tests.test_row_level_security import as_user

SCOPE = Scope(tenant="acme", project="docs")
FAKE = DeterministicFakeEmbedding(size=SMALL_DIM)


class TableEmbeddings(Embeddings):
    """Chosen vectors for chosen texts (the fake embedding for any other)."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.table.get(text) or FAKE.embed_query(text)


async def _open(settings: Settings) -> MemoryService:
    return await MemoryService.open(settings)


@pytest.fixture
async def small_service(dim6_settings: Settings) -> AsyncIterator[MemoryService]:
    """A MemoryService on this test's loop, 6-dimension embeddings."""
    async with MemoryService.open(dim6_settings) as svc:
        yield svc


@pytest.fixture
def store(small_service: MemoryService) -> MemsvcVectorStore:
    return MemsvcVectorStore(small_service, FAKE, SCOPE)


@pytest.fixture
def threaded_service(dim6_settings: Settings, loop_thread: LoopThread) -> Iterator[MemoryService]:
    """A MemoryService whose loop runs in another thread (an app's server loop)."""
    svc = loop_thread.run(_open(dim6_settings))
    yield svc
    loop_thread.run(svc.close())


# --------------------------------------------------------------------- filters

CATALOGUE = [
    ("metric units only", {"kind": "rule", "year": 10}),
    ("no imperial units", {"kind": "rule", "year": 9}),
    ("the user likes tea", {"kind": "preference", "year": 2024, "tags": ["drink"]}),
    ("draft about bridges", {"kind": "note", "year": 2023, "draft": True}),
    ("bridge spans table", {"kind": "note", "year": 2025}),
]


async def _catalogue(store: MemsvcVectorStore) -> None:
    texts = [text for text, _ in CATALOGUE]
    metadatas = [meta for _, meta in CATALOGUE]
    await store.aadd_texts(texts, metadatas, ids=[f"d{i}" for i in range(len(texts))])


async def _ids(store: MemsvcVectorStore, where: dict[str, Any]) -> set[str | None]:
    documents = await store.asimilarity_search("units", k=10, filter=where)
    return {doc.id for doc in documents}


async def test_filters_use_memsvc_where_language(store: MemsvcVectorStore) -> None:
    await _catalogue(store)
    assert await _ids(store, {"kind": "rule"}) == {"d0", "d1"}
    assert await _ids(store, {"kind": {"$ne": "rule"}}) == {"d2", "d3", "d4"}
    assert await _ids(store, {"kind": {"$in": ["preference", "note"]}}) == {"d2", "d3", "d4"}
    assert await _ids(store, {"draft": {"$exists": False}}) == {"d0", "d1", "d2", "d4"}
    assert await _ids(store, {"kind": "note", "year": {"$gte": 2024}}) == {"d4"}
    assert await _ids(store, {"tags": ["drink"]}) == {"d2"}


async def test_searches_return_what_is_valid_now_unless_asked(
    store: MemsvcVectorStore, small_service: MemoryService
) -> None:
    from datetime import UTC, datetime, timedelta

    await store.aadd_texts(["the office is in Paris", "the office opens at 9"], ids=["a", "b"])
    before = datetime.now(UTC)
    paris = await small_service.memories.get_by_key(SCOPE, "a")
    await small_service.memories.invalidate(paris.id, at=before + timedelta(microseconds=1))
    found = await store.asimilarity_search("office", k=5)
    assert [d.id for d in found] == ["b"]
    assert {d.id for d in await store.asimilarity_search("office", k=5, valid="all")} == {
        "a", "b"
    }
    then = await store.asimilarity_search("office", k=5, valid_at=before)
    assert {d.id for d in then} == {"a", "b"}
    mmr = await store.amax_marginal_relevance_search("office", k=2, valid="all")
    assert {d.id for d in mmr} == {"a", "b"}


async def test_numeric_filters_compare_numbers_not_text(store: MemsvcVectorStore) -> None:
    await _catalogue(store)
    # As text "9" > "10"; as numbers it is not.
    assert await _ids(store, {"year": {"$gt": 9, "$lt": 100}}) == {"d0"}
    assert await _ids(store, {"year": {"$lte": 9}}) == {"d1"}


async def test_filtered_search_returns_a_full_page(store: MemsvcVectorStore) -> None:
    texts = [f"memory {i}" for i in range(60)]
    metadatas = [{"wanted": i % 20 == 0} for i in range(60)]
    await store.aadd_texts(texts, metadatas)
    documents = await store.asimilarity_search("memory 7", k=3, filter={"wanted": True})
    assert sorted(doc.page_content for doc in documents) == ["memory 0", "memory 20", "memory 40"]


async def test_retriever_passes_filter_and_k(store: MemsvcVectorStore) -> None:
    await _catalogue(store)
    retriever = store.as_retriever(search_kwargs={"k": 1, "filter": {"kind": "preference"}})
    assert await retriever.ainvoke("anything") == [
        Document(id="d2", page_content="the user likes tea", metadata=CATALOGUE[2][1])
    ]
    mmr = store.as_retriever(
        search_type="mmr", search_kwargs={"k": 5, "fetch_k": 5, "filter": {"kind": "rule"}}
    )
    assert {doc.id for doc in await mmr.ainvoke("units")} == {"d0", "d1"}


async def test_relevance_scores_are_similarities(store: MemsvcVectorStore) -> None:
    await _catalogue(store)
    hits = await store.asimilarity_search_with_relevance_scores("the user likes tea", k=2)
    assert hits[0][0].id == "d2"
    assert hits[0][1] == pytest.approx(1.0, abs=1e-5)
    assert hits[1][1] < hits[0][1]
    # As LangChain's PGVector and in-memory stores: the cosine similarity s
    # itself (1 - cosine distance), 0 where it is negative.
    scored = await store.asimilarity_search_with_score("the user likes tea", k=5)
    relevance = await store.asimilarity_search_with_relevance_scores("the user likes tea", k=5)
    assert [r for _, r in relevance] == pytest.approx([max(0.0, s) for _, s in scored])
    assert all(0.0 <= r <= 1.0 for _, r in relevance)
    retriever = store.as_retriever(
        search_type="similarity_score_threshold", search_kwargs={"score_threshold": 0.999}
    )
    assert [doc.id for doc in await retriever.ainvoke("the user likes tea")] == ["d2"]


async def test_relevance_is_the_cosine_similarity_of_langchains_own_stores(
    small_service: MemoryService,
) -> None:
    table = {
        "query": [1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        "close": [0.9, 0.3, 0.0, 0.0, 0.0, 0.0],
        "near-orthogonal": [0.1, 0.0, 1.0, 0.0, 0.0, 0.0],
        "opposite": [-1.0, 0.2, 0.0, 0.0, 0.0, 0.0],
    }
    embeddings = TableEmbeddings(table)
    texts = ["close", "near-orthogonal", "opposite"]
    store = MemsvcVectorStore(small_service, embeddings, SCOPE)
    await store.aadd_texts(texts, ids=texts)
    reference = InMemoryVectorStore(embeddings)
    await reference.aadd_texts(texts, ids=texts)

    ours = {
        doc.id: score for doc, score in await store.asimilarity_search_with_score("query", k=3)
    }
    theirs = {
        doc.id: score for doc, score in await reference.asimilarity_search_with_score("query", k=3)
    }
    scored = await store.asimilarity_search_with_relevance_scores("query", k=3)
    relevance = {doc.id: score for doc, score in scored}
    assert ours == pytest.approx(theirs, abs=1e-5)  # the cosine similarity, as theirs
    assert relevance["close"] == pytest.approx(theirs["close"], abs=1e-5)
    assert relevance["near-orthogonal"] == pytest.approx(theirs["near-orthogonal"], abs=1e-5)
    assert relevance["opposite"] == 0.0  # theirs is negative; LangChain wants [0, 1]

    retriever = store.as_retriever(
        search_type="similarity_score_threshold",
        search_kwargs={"score_threshold": 0.5, "k": 3},
    )
    assert [doc.id for doc in await retriever.ainvoke("query")] == ["close"]


def test_relevance_follows_pgvectors_convention_for_each_distance() -> None:
    from memsvc.integrations.langchain import relevance_function

    sqrt2 = math.sqrt(2.0)
    cosine, ip, l2 = (relevance_function(d) for d in ("cosine", "ip", "l2"))
    assert [cosine(s) for s in (1.0, 0.5, 0.05, -0.3)] == [1.0, 0.5, 0.05, 0.0]
    assert [ip(s) for s in (0.8, -0.2)] == [0.8, 0.0]
    # memsvc's l2 score is 1 / (1 + d); PGVector's relevance is 1 - d / sqrt(2).
    for d in (0.0, 0.3, 1.0, sqrt2):
        assert l2(1.0 / (1.0 + d)) == pytest.approx(1.0 - d / sqrt2)
    assert l2(1.0 / (1.0 + 2.0)) == 0.0


async def test_mmr_prefers_diverse_documents(small_service: MemoryService) -> None:
    embeddings = TableEmbeddings(
        {
            "query": [1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            "a": [1.0, 0.05, 0.0, 0.0, 0.0, 0.0],
            "a twin": [1.0, 0.06, 0.0, 0.0, 0.0, 0.0],
            "b": [0.7, 0.0, 0.7, 0.0, 0.0, 0.0],
        }
    )
    store = MemsvcVectorStore(small_service, embeddings, SCOPE)
    await store.aadd_texts(["a", "a twin", "b"], ids=["a", "a2", "b"])
    nearest = await store.asimilarity_search("query", k=2)
    assert [doc.id for doc in nearest] == ["a", "a2"]
    diverse = await store.amax_marginal_relevance_search("query", k=2, fetch_k=3, lambda_mult=0.5)
    assert [doc.id for doc in diverse] == ["a", "b"]


# ------------------------------------------------------------- documents, scopes


async def test_documents_are_keyed_memories(
    store: MemsvcVectorStore, small_service: MemoryService
) -> None:
    await store.aadd_texts(["first"], [{"v": 1}], ids=["doc-1"])
    await store.aadd_texts(["second"], [{"v": 2}], ids=["doc-1"])
    memory = await small_service.memories.get_by_key(SCOPE, "doc-1")
    assert (memory.content, memory.metadata, memory.version) == ("second", {"v": 2}, 2)
    assert await small_service.memories.count(SCOPE) == 1
    assert [e.kind for e in await small_service.memories.history(memory.id)] == [
        "created",
        "updated",
    ]


async def test_stores_in_other_scopes_do_not_see_each_other(small_service: MemoryService) -> None:
    left = MemsvcVectorStore(small_service, FAKE, SCOPE)
    right = MemsvcVectorStore(small_service, FAKE, Scope(tenant="acme", project="other"))
    await left.aadd_texts(["left text"], ids=["same-id"])
    await right.aadd_texts(["right text"], ids=["same-id"])
    assert [d.page_content for d in await left.aget_by_ids(["same-id"])] == ["left text"]
    await right.adelete(["same-id"])
    assert await right.aget_by_ids(["same-id"]) == []
    assert [d.page_content for d in await left.asimilarity_search("x", k=5)] == ["left text"]


async def test_repeated_id_in_one_batch_keeps_the_last(store: MemsvcVectorStore) -> None:
    await store.aadd_texts(["one", "two", "three"], ids=["k", "other", "k"])
    assert [d.page_content for d in await store.aget_by_ids(["k", "other"])] == ["three", "two"]


async def test_memories_added_without_key_show_their_memory_id(
    store: MemsvcVectorStore, small_service: MemoryService
) -> None:
    memory = await small_service.memories.add(SCOPE, "added by the app", embedding=[1.0] * 6)
    documents = await store.asimilarity_search_by_vector([1.0] * 6, k=1)
    assert documents == [Document(id=str(memory.id), page_content="added by the app")]


@pytest.fixture
async def rls_dim6(memsvc_postgres: TestPostgres) -> AsyncIterator[Settings]:
    """Settings of a runtime role (no BYPASSRLS) on a row-level-security database."""
    suffix = uuid.uuid4().hex[:10]
    name, role = f"memsvc_lcrls_{suffix}", f"memsvc_lcrt_{suffix}"
    dsn = await memsvc_postgres.create_database(name)
    owner = settings_for_tests(dsn, row_level_security=True, embedding_dim=SMALL_DIM)
    await asyncio.to_thread(migrate.upgrade, owner, dsn)
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS")
        await admin.execute(f"GRANT USAGE ON SCHEMA memsvc TO {role}")
        await admin.execute(
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA memsvc TO {role}"
        )
        await admin.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA memsvc TO {role}")
    finally:
        await admin.close()
    runtime = as_user(dsn, role)
    yield settings_for_tests(runtime, row_level_security=True, embedding_dim=SMALL_DIM)
    await memsvc_postgres.drop_database(name)
    admin = await asyncpg.connect(memsvc_postgres.dsn)
    try:
        await admin.execute(f"DROP ROLE IF EXISTS {role}")
    finally:
        await admin.close()


async def test_store_works_under_row_level_security(rls_dim6: Settings) -> None:
    async with MemoryService.open(rls_dim6) as svc:
        acme = MemsvcVectorStore(svc, FAKE, SCOPE)
        other = MemsvcVectorStore(svc, FAKE, Scope(tenant="other", project="docs"))
        await acme.aadd_texts(["acme's text"], [{"k": 1}], ids=["x"])
        await acme.aadd_texts(["acme's new text"], [{"k": 2}], ids=["x"])
        assert [d.page_content for d in await acme.aget_by_ids(["x"])] == ["acme's new text"]
        assert await other.aget_by_ids(["x"]) == []
        assert await other.asimilarity_search("acme's new text", k=3) == []
        await other.adelete(["x"])
        assert [d.id for d in await acme.asimilarity_search("x", k=3, filter={"k": 2})] == ["x"]
        await acme.adelete(["x"])
        assert await acme.aget_by_ids(["x"]) == []


# --------------------------------------------------------------------- threads


def test_threads_writing_overlapping_ids_lose_nothing(
    threaded_service: MemoryService, loop_thread: LoopThread
) -> None:
    store = MemsvcVectorStore(threaded_service, FAKE, SCOPE)
    keys = [f"k{i}" for i in range(12)]
    writes: Counter[str] = Counter()
    written: dict[str, set[str]] = {key: set() for key in keys}
    lock = threading.Lock()
    errors: list[BaseException] = []

    def writer(number: int) -> None:
        rng = random.Random(number)
        try:
            for round_ in range(6):
                # Batches in different key orders: must not deadlock each other.
                batch = rng.sample(keys, 5)
                texts = [f"{key} by {number} in {round_}" for key in batch]
                store.add_texts(texts, [{"writer": number}] * 5, ids=batch)
                with lock:
                    writes.update(batch)
                    for key, text in zip(batch, texts, strict=True):
                        written[key].add(text)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []

    documents = store.get_by_ids(keys)
    assert sorted(doc.id or "" for doc in documents) == sorted(keys)
    for doc in documents:
        assert doc.page_content in written[doc.id or ""]
    assert loop_thread.run(threaded_service.memories.count(SCOPE)) == len(keys)
    for key in keys:
        memory = loop_thread.run(threaded_service.memories.get_by_key(SCOPE, key))
        # Every acknowledged put is one version: none lost, none doubled.
        assert memory.version == writes[key]


def test_sync_methods_from_many_threads_read_consistently(
    threaded_service: MemoryService,
) -> None:
    store = MemsvcVectorStore(threaded_service, FAKE, SCOPE)
    store.add_texts([f"text {i}" for i in range(20)], ids=[f"t{i}" for i in range(20)])
    results: list[list[str | None]] = []

    def reader() -> None:
        found = store.similarity_search("text 3", k=1)
        results.append([doc.id for doc in found])

    threads = [threading.Thread(target=reader) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [["t3"]] * 10


# ------------------------------------------------------------------ sync client


def test_sync_client_serves_sync_and_async_callers(dim6_settings: Settings) -> None:
    with SyncMemoryService.open(dim6_settings) as svc:
        store = MemsvcVectorStore(svc, FAKE, SCOPE)
        assert store.add_texts(["from sync code"], [{"via": "sync"}], ids=["s"]) == ["s"]
        assert svc.memories.get_by_key(SCOPE, "s").content == "from sync code"

        async def from_another_loop() -> list[Document]:
            await store.aadd_texts(["from async code"], [{"via": "async"}], ids=["a"])
            return await store.asimilarity_search("from async code", k=1, filter={"via": "async"})

        assert asyncio.run(from_another_loop()) == [
            Document(id="a", page_content="from async code", metadata={"via": "async"})
        ]
        store.delete(["s", "a"])
        assert store.get_by_ids(["s", "a"]) == []


def test_from_texts_builds_a_store(dim6_settings: Settings) -> None:
    with SyncMemoryService.open(dim6_settings) as svc:
        store = MemsvcVectorStore.from_texts(["hello"], FAKE, ids=["h"], svc=svc, scope=SCOPE)
        assert [doc.id for doc in store.similarity_search("hello", k=1)] == ["h"]
        with pytest.raises(ValidationError) as info:
            MemsvcVectorStore.from_texts(["hello"], FAKE, svc=svc)
        assert info.value.field == "scope"


# --------------------------------------------------------------------- errors


def _field(info: pytest.ExceptionInfo[ValidationError]) -> str:
    return info.value.field


async def test_mismatched_lengths_name_the_field(store: MemsvcVectorStore) -> None:
    with pytest.raises(ValidationError) as info:
        await store.aadd_texts(["a", "b"], ids=["1"])
    assert _field(info) == "ids"
    with pytest.raises(ValidationError) as info:
        await store.aadd_texts(["a", "b"], metadatas=[{}])
    assert _field(info) == "metadatas"
    with pytest.raises(ValidationError) as info:
        await store.aadd_texts(["a", "b"], ids=["1", ""])
    assert _field(info) == "ids[1]"
    with pytest.raises(ValidationError) as info:
        await store.aadd_texts(["a", "b"], metadatas=[{}, ["not", "a", "mapping"]])  # type: ignore[list-item]
    assert _field(info) == "metadatas[1]"
    with pytest.raises(ValidationError) as info:
        await store.aadd_texts(["a", 2])  # type: ignore[list-item]
    assert _field(info) == "texts[1]"
    assert await store.aget_by_ids(["1"]) == []


@pytest.mark.parametrize(
    ("text", "metadata", "field"),
    [
        ("bad\x00text", {}, "content"),
        ("fine", {"x": object()}, "metadata"),
        ("fine", {"x": float("nan")}, "metadata"),
    ],
)
async def test_a_bad_document_writes_nothing_of_its_batch(
    store: MemsvcVectorStore, small_service: MemoryService, text: str, metadata: Any, field: str
) -> None:
    # "a" sorts, and is written, before "b": the transaction must undo it.
    with pytest.raises(ValidationError) as info:
        await store.aadd_texts(["good", text], [{}, metadata], ids=["a", "b"])
    assert _field(info) == field
    assert await small_service.memories.count(SCOPE) == 0


async def test_wrong_embedding_size_names_the_field(small_service: MemoryService) -> None:
    store = MemsvcVectorStore(small_service, DeterministicFakeEmbedding(size=5), SCOPE)
    with pytest.raises(ValidationError) as info:
        await store.aadd_texts(["x"])
    assert _field(info) == "embedding"
    with pytest.raises(ValidationError) as info:
        await store.asimilarity_search("x")
    assert _field(info) == "query"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"filter": {"year": {"$gt": "x"}}}, "where.year.$gt"),
        ({"filter": {"year": {"$like": 1}}}, "where.year"),
        ({"filter": {"$or": []}}, "where.$or"),
        ({"k": 0}, "k"),
    ],
)
async def test_bad_search_arguments_name_the_field(
    store: MemsvcVectorStore, kwargs: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as info:
        await store.asimilarity_search("x", **kwargs)
    assert _field(info) == field


async def test_bad_arguments_elsewhere_name_the_field(
    store: MemsvcVectorStore, small_service: MemoryService
) -> None:
    with pytest.raises(ValidationError) as info:
        await store.amax_marginal_relevance_search("x", lambda_mult=2.0)
    assert _field(info) == "lambda_mult"
    with pytest.raises(ValidationError) as info:
        await store.amax_marginal_relevance_search("x", k=2, fetch_k=5000)
    assert _field(info) == "fetch_k"
    with pytest.raises(ValidationError) as info:
        await store.adelete(None)
    assert _field(info) == "ids"
    with pytest.raises(ValidationError) as info:
        await store.adelete("abc")  # type: ignore[arg-type]
    assert _field(info) == "ids"
    with pytest.raises(ValidationError) as info:
        await store.aget_by_ids(["ok", 3])  # type: ignore[list-item]
    assert _field(info) == "ids[1]"
    with pytest.raises(ValidationError) as info:
        MemsvcVectorStore(object(), FAKE, SCOPE)  # type: ignore[arg-type]
    assert _field(info) == "svc"
    assert isinstance(info.value, TypeError)  # as every integration says for it
    assert "SyncMemoryService" in str(info.value)
    with pytest.raises(ValidationError) as info:
        MemsvcVectorStore(small_service, FAKE, "acme")  # type: ignore[arg-type]
    assert _field(info) == "scope"
    with pytest.raises(ValidationError) as info:
        MemsvcVectorStore(small_service, object(), SCOPE)  # type: ignore[arg-type]
    assert _field(info) == "embedding"


def test_sync_method_without_a_running_service_loop_is_refused(dim6_settings: Settings) -> None:
    loop = asyncio.new_event_loop()
    try:
        svc = loop.run_until_complete(_open(dim6_settings))
        store = MemsvcVectorStore(svc, FAKE, SCOPE)
        with pytest.raises(MemsvcError, match="not running"):
            store.add_texts(["never written"])
        assert loop.run_until_complete(svc.memories.count(SCOPE)) == 0
        loop.run_until_complete(svc.close())
    finally:
        loop.close()


async def test_sync_method_on_the_services_own_loop_is_refused(store: MemsvcVectorStore) -> None:
    with pytest.raises(MemsvcError, match="async forms"):
        store.similarity_search("x")
