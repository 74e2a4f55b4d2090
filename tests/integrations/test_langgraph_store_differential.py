"""MemsvcStore answers like LangGraph's own InMemoryStore: a differential test.

At least 10,000 random operations (puts, deletes, gets, searches with and
without filters and queries, namespace listings) run in batches against both
stores, with the same embedding function, and every answer must agree.

Where InMemoryStore's answer is an accident of its dict rather than the
interface's meaning, the test follows LangGraph's PostgresStore instead, and
says so where it does:

- namespaces whose items were all deleted stay in InMemoryStore's dict (even a
  get of an unknown namespace adds one); PostgresStore lists only namespaces
  holding items, so the emptied ones are pruned from the reference;
- searches without a query come in dict order there; PostgresStore returns
  the most recently put first, which is what MemsvcStore does (ties within one
  batch broken by namespace and key), so the reference's full answer is
  re-sorted that way before paging.

Searches with a query must return the same items in the same order, up to
ties in score. Every item is indexed (InMemoryStore pads a short page with
unindexed items, ignoring the offset; PostgresStore returns only indexed
items). TTLs are tested on their own (test_langgraph_store.py):
InMemoryStore keeps none. Reads and writes go in separate batches, since
InMemoryStore answers a batch's reads before applying its writes.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

pytest.importorskip("langgraph.store.memory", reason="needs the langgraph extra")

from langgraph.store.base import (
    GetOp,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    SearchItem,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from memsvc import MemoryService
from memsvc.db import migrate
from memsvc.embedding import HashingEmbedder
from memsvc.integrations.langgraph import MemsvcStore
from memsvc.langgraph_db import store_queries as store_queries
from memsvc.testing.postgres import TestPostgres, settings_for_tests

DIMS = 16
OPERATIONS = 10_000
BATCH = 25
SCORE_TOLERANCE = 1e-4
WORDS = "red green blue cat dog fish tree rock wind rain sun moon star sea sky".split()
LABELS = ("a", "b", "c")
NAMESPACES = (
    [(x,) for x in LABELS]
    + [(x, y) for x in LABELS for y in LABELS[:2]]
    + [
        ("a", "b", "c"),
        ("a", "a", "a"),
        ("c", "b", "a"),
    ]
)
KEYS = [f"k{i}" for i in range(12)]


def embed(texts: Sequence[str]) -> list[list[float]]:
    embedder = HashingEmbedder(DIMS)
    return [embedder.embed_one(text).tolist() for text in texts]


@pytest.fixture
async def small_service(memsvc_postgres: TestPostgres) -> AsyncIterator[MemoryService]:
    """A service on a database migrated with 16-dimensional embeddings."""
    name = f"memsvc_lg_{uuid.uuid4().hex[:10]}"
    dsn = await memsvc_postgres.create_database(name)
    settings = settings_for_tests(dsn, embedding_dim=DIMS)
    try:
        await asyncio.to_thread(migrate.upgrade, settings, dsn)
        async with MemoryService.open(settings) as service:
            yield service
    finally:
        await memsvc_postgres.drop_database(name)


def random_value(rng: random.Random) -> dict[str, Any]:
    n: float = rng.randint(0, 20) if rng.random() < 0.8 else rng.randint(0, 40) / 2
    return {
        "text": " ".join(rng.choices(WORDS, k=rng.randint(1, 3))),
        "n": n,
        "tag": rng.choice("xyz"),
        "meta": {"color": rng.choice(["red", "blue"]), "size": rng.randint(1, 3)},
    }


def random_filter(rng: random.Random) -> dict[str, Any] | None:
    choice = rng.randrange(9)
    a, b = sorted(rng.randint(0, 20) for _ in range(2))
    return [
        None,
        None,
        {"tag": rng.choice("xyz")},
        {"n": {"$gt": a}},
        {"n": {"$gte": a, "$lte": b}},
        {"n": {"$ne": a}, "tag": {"$eq": rng.choice("xyz")}},
        {"meta": {"color": rng.choice(["red", "blue"])}},
        {"n": {"$lt": a + 0.5}},
        {"meta": {"size": {"$gte": 2}}, "tag": {"$ne": "x"}},
    ][choice]


def random_prefix(rng: random.Random) -> tuple[str, ...]:
    namespace = rng.choice(NAMESPACES)
    return namespace[: rng.randint(0, len(namespace))]


def random_writes(rng: random.Random, count: int) -> list[Op]:
    """Puts and deletes; no text twice in one batch.

    (InMemoryStore mis-assigns embeddings when two puts of one batch embed the
    same text: it embeds each distinct text once but counts every use.)
    """
    ops: list[Op] = []
    texts: set[str] = set()
    for _ in range(count):
        namespace, key = rng.choice(NAMESPACES), rng.choice(KEYS)
        if rng.random() < 0.2:
            ops.append(PutOp(namespace, key, None))
            continue
        value = random_value(rng)
        while value["text"] in texts:
            value = random_value(rng)
        texts.add(value["text"])
        ops.append(PutOp(namespace, key, value))
    return ops


def random_read(rng: random.Random) -> Op:
    kind = rng.random()
    if kind < 0.3:
        return GetOp(rng.choice(NAMESPACES), rng.choice(KEYS))
    if kind < 0.8:
        query = " ".join(rng.choices(WORDS, k=rng.randint(1, 2))) if rng.random() < 0.6 else None
        return SearchOp(
            random_prefix(rng),
            filter=random_filter(rng),
            limit=rng.randint(1, 12),
            offset=rng.choice([0, 0, 1, 3, 7]),
            query=query,
        )
    conditions = []
    if rng.random() < 0.5:
        path = tuple(rng.choice([*LABELS, "*"]) for _ in range(rng.randint(1, 2)))
        conditions.append(MatchCondition("prefix", path))
    if rng.random() < 0.3:
        path = tuple(rng.choice([*LABELS, "*"]) for _ in range(rng.randint(1, 2)))
        conditions.append(MatchCondition("suffix", path))
    return ListNamespacesOp(
        match_conditions=tuple(conditions),
        max_depth=rng.choice([None, None, 1, 2]),
        limit=rng.randint(1, 20),
        offset=rng.choice([0, 0, 2]),
    )


def prune_empty_namespaces(reference: InMemoryStore) -> None:
    # PostgresStore semantics: a namespace exists while it holds items.
    for namespace in [ns for ns, items in reference._data.items() if not items]:
        del reference._data[namespace]


def check_query_search(
    got: list[SearchItem], ranking: list[SearchItem], op: SearchOp, where: str
) -> None:
    """Same items in the same order as the reference, up to ties in score."""
    expected = ranking[op.offset : op.offset + op.limit]
    assert len(got) == len(expected), where
    assert len({(i.namespace, i.key) for i in got}) == len(got), where
    for position, item in enumerate(got):
        want = expected[position]
        assert item.score is not None and want.score is not None, where
        assert abs(item.score - want.score) <= SCORE_TOLERANCE, where
        tied = {
            (i.namespace, i.key): i.value
            for i in ranking
            if i.score is not None and abs(i.score - want.score) <= SCORE_TOLERANCE
        }
        assert tied.get((item.namespace, item.key)) == item.value, where


@pytest.mark.parametrize("path", ["exact", "hnsw"])
async def test_memsvc_store_answers_like_the_in_memory_store(
    small_service: MemoryService, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The test's namespaces are small, so searches scan them exactly; the
    # second run sends every search down the statement's branch for large
    # namespaces instead (ordered by the distance operator, which the planner
    # serves from the HNSW index once tables are large; on tables this small
    # it may still sort, so this run checks that branch's SQL, not HNSW recall).
    if path == "hnsw":
        monkeypatch.setattr(store_queries, "EXACT_UP_TO", 0)
    index = {"dims": DIMS, "embed": embed, "fields": ["text"]}
    store = MemsvcStore(small_service, index=index)  # type: ignore[arg-type]
    reference = InMemoryStore(index=index)  # type: ignore[arg-type]
    rng = random.Random(20261123)
    last_put: dict[tuple[tuple[str, ...], str], int] = {}
    done = compared = 0
    batch_number = 0
    while done < OPERATIONS:
        batch_number += 1
        if rng.random() < 0.4:
            ops: list[Op] = random_writes(rng, rng.randint(1, BATCH))
            await store.abatch(ops)
            await reference.abatch(ops)
            for op in ops:
                assert isinstance(op, PutOp)
                last_put[(op.namespace, op.key)] = batch_number
            prune_empty_namespaces(reference)
            done += len(ops)
            continue
        ops = [random_read(rng) for _ in range(rng.randint(1, BATCH))]
        got = await store.abatch(ops)
        want = await reference.abatch(ops)
        for op, mine, theirs in zip(ops, got, want, strict=True):
            where = f"batch {batch_number}: {op}"
            if isinstance(op, GetOp):
                assert (mine and mine.value) == (theirs and theirs.value), where
            elif isinstance(op, ListNamespacesOp):
                # Asked again: gets earlier in the batch may have added empty namespaces.
                prune_empty_namespaces(reference)
                theirs = (await reference.abatch([op]))[0]
                assert mine == theirs, where
            else:
                assert isinstance(op, SearchOp)
                everything = (await reference.abatch([op._replace(limit=10_000, offset=0)]))[0]
                assert isinstance(mine, list) and isinstance(everything, list)
                if op.query:
                    check_query_search(mine, everything, op, where)
                else:
                    # PostgresStore order: most recently put first.
                    everything.sort(key=lambda i: (i.namespace, i.key))
                    everything.sort(key=lambda i: ".".join(i.namespace) + "\x00" + i.key)
                    everything.sort(key=lambda i: -last_put[(i.namespace, i.key)])
                    page = everything[op.offset : op.offset + op.limit]
                    assert [(i.namespace, i.key, i.value) for i in mine] == [
                        (i.namespace, i.key, i.value) for i in page
                    ], where
            compared += 1
        done += len(ops)
    assert done >= OPERATIONS and compared > OPERATIONS / 2
