"""MemsvcStore query searches in mid-sized namespaces: ranked by sign bits, then exactly.

A namespace of more than ``EXACT_UP_TO`` vectors that holds a small share of
the table is searched through its sign bits (migration 0018); these tests pin
what that plan returns against the exact ranking PostgreSQL computes itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

pytest.importorskip("langgraph.store.base", reason="needs the langgraph extra")

from langgraph.store.base import PutOp

from memsvc import MemoryService
from memsvc.integrations.langgraph import MemsvcStore
from memsvc.langgraph_db import store as langgraph_store
from memsvc.langgraph_db.store import LangGraphStoreRepository
from memsvc.langgraph_db.store_queries import EXACT_UP_TO

MID = EXACT_UP_TO + 100


def embed_function(dim: int):  # type: ignore[no-untyped-def]
    """Texts ``d<i>`` / ``q<i>`` name dense unit vectors around 20 topics (like real embeddings)."""
    rng = np.random.default_rng(5)
    topics = rng.normal(size=(20, dim))

    def vector(text: str) -> list[float]:
        number = int(text[1:])
        noise = np.random.default_rng(number * 2 + (text[0] == "q")).normal(size=dim)
        v = topics[number % 20] + 0.8 * noise
        return (v / np.linalg.norm(v)).tolist()

    def embed(texts: Sequence[str]) -> list[list[float]]:
        return [vector(text) for text in texts]

    return embed


@pytest.fixture
async def store(service: MemoryService) -> MemsvcStore:
    """A store whose namespace ``("mid",)`` holds MID items among three times as many."""
    dims = service.settings.embedding_dim
    store = MemsvcStore(
        service, index={"dims": dims, "embed": embed_function(dims), "fields": ["text"]}
    )
    ops = [PutOp(("mid",), f"k{i}", {"text": f"d{i}", "i": i}) for i in range(MID)]
    ops += [PutOp(("mid", "sub"), f"s{i}", {"text": f"d{i + 5000}"}) for i in range(20)]
    # Names that continue "mid" with a character before '.': not under ("mid",).
    ops += [PutOp(("mid-x",), f"x{i}", {"text": f"d{i + 7000}"}) for i in range(20)]
    ops += [PutOp(("rest",), f"r{i}", {"text": f"d{i + 6000}"}) for i in range(3 * MID)]
    for start in range(0, len(ops), 500):
        await store.abatch(ops[start : start + 500])
    async with service.pool.acquire() as conn:
        # The plan weighs the namespace against the table's size as the planner knows it.
        await conn.execute(f"ANALYZE {service.settings.db_schema}.langgraph_store_vectors")
    return store


async def exact(service: MemoryService, query: str, prefix: str) -> list[tuple[str, float]]:
    """Every live item under ``prefix`` with its cosine distance, nearest first (by SQL)."""
    dims = service.settings.embedding_dim
    vector = embed_function(dims)([query])[0]
    schema = service.settings.db_schema
    async with service.pool.acquire() as conn:
        rows = await conn.fetch(
            f"SELECT v.key, min(v.embedding <=> $1) AS d "
            f"FROM {schema}.langgraph_store_vectors AS v "
            f"JOIN {schema}.langgraph_store_items AS i USING (tenant_id, prefix, key) "
            "WHERE v.tenant_id = 'default' AND (v.prefix = $2 OR v.prefix LIKE $2 || '.%') "
            "AND (i.expires_at IS NULL OR i.expires_at > now()) "
            "GROUP BY v.key ORDER BY d, v.key",
            vector,
            prefix,
        )
    return [(row["key"], row["d"]) for row in rows]


@pytest.fixture
def quantized_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts searches that took the sign-bit plan (the statements still run for real)."""
    calls: list[int] = []
    original = LangGraphStoreRepository._search_quantized

    async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(LangGraphStoreRepository, "_search_quantized", counted)
    return calls


async def test_every_candidate_reranked_gives_the_exact_ranking_and_pages(
    store: MemsvcStore,
    service: MemoryService,
    quantized_calls: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With more candidates than the namespace holds, the bits decide nothing:
    # the answer must be the exact ranking, sub-namespaces in, lookalikes out.
    monkeypatch.setattr(langgraph_store, "RERANK_MIN", 10 * MID)
    for query in ("q1", "q2", "q7"):
        truth = await exact(service, query, "mid")
        first = await store.asearch(("mid",), query=query, limit=10)
        second = await store.asearch(("mid",), query=query, limit=10, offset=10)
        got = [(h.key, h.score) for h in first + second]
        assert [k for k, _ in got] == [k for k, _ in truth[:20]]
        for (_, score), (_, distance) in zip(got, truth, strict=False):
            assert score == pytest.approx(1.0 - distance, abs=1e-5)
    assert len(quantized_calls) == 6


async def test_default_candidates_find_nearly_every_true_neighbour(
    store: MemsvcStore, service: MemoryService, quantized_calls: list[int]
) -> None:
    found = wanted = 0
    for i in range(10):
        query = f"q{i}"
        truth = {k for k, _ in (await exact(service, query, "mid"))[:10]}
        hits = await store.asearch(("mid",), query=query, limit=10)
        assert len(hits) == 10
        found += len(truth & {h.key for h in hits})
        wanted += 10
    assert len(quantized_calls) == 10
    assert found / wanted >= 0.9


async def test_expired_items_drop_out_and_the_page_stays_full(
    store: MemsvcStore,
    service: MemoryService,
    quantized_calls: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    query = "q3"
    # (keys k* are the items of ("mid",) itself, s* those of ("mid", "sub"))
    nearest = [k for k, _ in await exact(service, query, "mid") if k[0] == "k"][:30]
    # The 30 nearest items become copies of the query and expire (TTL of 0.06 s): the
    # first 20 candidates are all dead, so the search must read more of them.
    await store.abatch([PutOp(("mid",), key, {"text": "q3"}, ttl=0.001) for key in nearest])
    await asyncio.sleep(0.2)
    monkeypatch.setattr(langgraph_store, "RERANK_MIN", 20)
    monkeypatch.setattr(langgraph_store, "RERANK_FACTOR", 2)
    hits = await store.asearch(("mid",), query=query, limit=10)
    assert len(hits) == 10 and not set(nearest) & {h.key for h in hits}
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)  # type: ignore[type-var]
    assert quantized_calls


async def test_filtered_and_small_namespace_searches_keep_their_plans(
    store: MemsvcStore, quantized_calls: list[int]
) -> None:
    hits = await store.asearch(("mid",), query="q0", filter={"i": {"$lt": 30}}, limit=10)
    assert len(hits) == 10 and all(h.value["i"] < 30 for h in hits)
    assert await store.asearch(("mid", "sub"), query="q0", limit=5)
    # The whole table: the namespace is every vector, the graph serves it best.
    assert len(await store.asearch((), query="q0", limit=5)) == 5
    assert quantized_calls == []
