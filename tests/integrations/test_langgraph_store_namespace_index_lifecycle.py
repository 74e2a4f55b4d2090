"""MemsvcStore namespace indexes over their life: built, found, dropped, raced.

A namespace's own HNSW index names its tenant and namespace in its
predicate, so it must go when they go (erasure, the namespace emptied), and
no build may land after them. While a namespace has no usable index of its
own, its searches walk the table's graph, whose walk gives up after
``hnsw_max_scan_tuples`` tuples: these tests set that budget low, so the
neighbourhood of another tenant's vectors exhausts it the way a big table's
does, and check that no page comes back short because of it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

pytest.importorskip("langgraph.store.base", reason="needs the langgraph extra")

from langgraph.store.base import PutOp

from memsvc import MemoryService, Scope, Settings
from memsvc.db.tables import OPCLASSES, store_vector_index_expression
from memsvc.integrations.langgraph import MemsvcStore
from memsvc.langgraph_db import store as langgraph_store
from memsvc.langgraph_db import store_index_queries as iq
from memsvc.langgraph_db import store_indexes as langgraph_store_indexes
from memsvc.langgraph_db import store_queries as q
from memsvc.langgraph_db.store import LangGraphStoreRepository
from tests.integrations.test_langgraph_store_namespace_index import (
    namespace_indexes,
    wait_for_waiting_build,
)
from tests.integrations.test_langgraph_store_search import embed_function

SIZE = 600  # items of an indexed namespace (above the exact-scan size, 500)
CROWD = 2_000  # another tenant's items, all near the queries' topic
EVERY = {"kind": "doc"}  # a filter every item matches: the search takes the graph plan
RARE = {"rare": True}  # a filter 12 items of each filled namespace match


def store_of(service: MemoryService, tenant: str) -> MemsvcStore:
    dims = service.settings.embedding_dim
    index = {"dims": dims, "embed": embed_function(dims), "fields": ["text"]}
    return MemsvcStore(service, index=index, tenant=tenant)  # type: ignore[arg-type]


def off_topic(i: int) -> str:
    """A text of any topic but the queries' (``q0``, ``q20``, ... are topic 0)."""
    return f"d{20 * i + 1 + i % 19}"


async def fill(store: MemsvcStore, namespace: tuple[str, ...], texts: list[str]) -> None:
    ops = [
        PutOp(namespace, f"k{i}", {"text": text, "kind": "doc", "i": i, "rare": i % 50 == 0})
        for i, text in enumerate(texts)
    ]
    for start in range(0, len(ops), 500):
        await store.abatch(ops[start : start + 500])
    # The counts its writes started (and a build they started: an ANALYZE
    # while a build runs would end one of them as a deadlock).
    await store.await_index_builds()


async def analyze(service: MemoryService) -> None:
    async with service.pool.acquire() as conn:
        await conn.execute(f"ANALYZE {service.settings.db_schema}.langgraph_store_vectors")
        await conn.execute(f"ANALYZE {service.settings.db_schema}.langgraph_store_items")


@pytest.fixture(autouse=True)
def small_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Namespaces of SIZE items get their own index."""
    monkeypatch.setattr(langgraph_store, "NAMESPACE_INDEX_FROM", SIZE - 50)


@pytest.fixture
async def crowded(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[MemoryService]:
    """A service whose walks give up early, on a table where tenant acme crowds topic 0.

    acme's ``("crowd",)`` holds CROWD items of topic 0, ``("mine",)`` SIZE
    others; tenant default's ``("docs",)`` and globex's ``("own",)`` SIZE
    items of other topics each. A walk of the table's graph for a topic-0
    query meets acme's vectors first and spends its whole budget on them.

    At this size PostgreSQL would rather sort a namespace's few hundred
    vectors than walk the graph; at the sizes where namespaces get indexes
    of their own it walks. ``enable_sort = off`` makes it walk here too.
    """
    assert settings.database_url is not None
    conn = await asyncpg.connect(settings.database_url)
    try:
        database = await conn.fetchval("SELECT current_database()")
        await conn.execute(f'ALTER DATABASE "{database}" SET enable_sort = off')
    finally:
        await conn.close()
    tight = settings.model_copy(update={"hnsw_max_scan_tuples": 1})
    async with MemoryService.open(tight) as service:
        # Filled with no namespace index built on the way (the tests build them).
        monkeypatch.setattr(langgraph_store, "NAMESPACE_INDEX_FROM", 10 * CROWD)
        acme, docs, globex = (store_of(service, t) for t in ("acme", "default", "globex"))
        await fill(acme, ("crowd",), [f"d{20 * i}" for i in range(CROWD)])
        await fill(acme, ("mine",), [off_topic(i) for i in range(SIZE)])
        await fill(docs, ("docs",), [off_topic(i) for i in range(SIZE)])
        await fill(globex, ("own",), [off_topic(i) for i in range(SIZE)])
        await analyze(service)
        monkeypatch.setattr(langgraph_store, "NAMESPACE_INDEX_FROM", SIZE - 50)
        yield service


async def full_pages(store: MemsvcStore, namespace: tuple[str, ...], queries: int) -> list[int]:
    """Hit counts of topic-0 searches: unfiltered, and filtered to all or to 12 items.

    Each must be 10: that many items match every one of them.
    """
    counts = []
    for j in range(queries):
        query = f"q{20 * j}"
        for filter in (None, EVERY, RARE):
            hits = await store.asearch(namespace, query=query, filter=filter, limit=10)
            counts.append(len(hits))
    return counts


async def test_a_search_before_the_namespace_index_exists_returns_full_pages(
    crowded: MemoryService,
) -> None:
    docs = store_of(crowded, "default")
    assert await full_pages(docs, ("docs",), 3) == [10] * 9
    await docs.await_index_builds()
    assert await namespace_indexes(crowded) == {q.namespace_index_name("default", "docs"): True}
    assert await full_pages(docs, ("docs",), 3) == [10] * 9


async def test_a_search_whose_namespace_index_vanished_returns_full_pages(
    crowded: MemoryService,
) -> None:
    docs = store_of(crowded, "default")
    await docs.asearch(("docs",), query="q1", limit=1)
    await docs.await_index_builds()
    # The store still believes the index is there (its sizes are counted every 30 s).
    async with crowded.pool.acquire() as conn:
        await conn.execute(
            f"DROP INDEX {crowded.settings.db_schema}.{q.namespace_index_name('default', 'docs')}"
        )
    assert await full_pages(docs, ("docs",), 3) == [10] * 9


async def test_erasures_index_builds_and_searches_racing_never_shorten_a_page(
    crowded: MemoryService,
) -> None:
    acme, docs, globex = (store_of(crowded, t) for t in ("acme", "default", "globex"))
    await acme.asearch(("mine",), query="q1", limit=1)
    await acme.await_index_builds()
    assert await namespace_indexes(crowded) == {q.namespace_index_name("acme", "mine"): True}

    counts: list[int] = []

    async def search(store: MemsvcStore, namespace: tuple[str, ...]) -> None:
        for _ in range(6):
            counts.extend(await full_pages(store, namespace, 2))
            await asyncio.sleep(0.05)

    erased, *_ = await asyncio.gather(
        crowded.erase(Scope("acme")), search(docs, ("docs",)), search(globex, ("own",))
    )
    for store in (docs, globex):
        await store.await_index_builds()
    assert counts == [10] * len(counts)
    assert erased.verified
    assert await namespace_indexes(crowded) == {
        q.namespace_index_name("default", "docs"): True,
        q.namespace_index_name("globex", "own"): True,
    }
    assert await full_pages(docs, ("docs",), 2) == [10] * 6


async def test_erasing_a_tenant_whose_id_has_a_backslash_drops_its_namespace_indexes(
    service: MemoryService,
) -> None:
    tenant = "it's a\\b"
    odd, other = store_of(service, tenant), store_of(service, "default")
    await fill(odd, ("big", "it's\\"), [off_topic(i) for i in range(SIZE)])
    await fill(other, ("rest",), [f"d{i}" for i in range(5 * SIZE)])
    await analyze(service)
    await odd.asearch(("big", "it's\\"), query="q1", limit=1)
    await odd.await_index_builds()
    assert list((await namespace_indexes(service)).values()) == [True]

    receipt = await service.erase(Scope(tenant))
    assert await namespace_indexes(service) == {}
    assert receipt.verified, receipt.remaining


async def test_deleting_every_item_of_an_indexed_namespace_drops_its_index(
    service: MemoryService,
) -> None:
    store = store_of(service, "default")
    await fill(store, ("big",), [off_topic(i) for i in range(SIZE)])
    await fill(store, ("rest",), [f"d{i}" for i in range(5 * SIZE)])
    await analyze(service)
    await store.asearch(("big",), query="q1", limit=1)
    await store.await_index_builds()
    assert list((await namespace_indexes(service)).values()) == [True]

    deletes = [PutOp(("big",), f"k{i}", None) for i in range(SIZE)]
    await store.abatch(deletes[: SIZE // 2])
    await store.await_index_builds()
    assert list((await namespace_indexes(service)).values()) == [True]  # not empty yet
    await store.abatch(deletes[SIZE // 2 :])
    await store.await_index_builds()
    assert await namespace_indexes(service) == {}


async def test_gc_drops_the_indexes_of_namespaces_that_emptied(service: MemoryService) -> None:
    store = store_of(service, "default")
    ops = [
        PutOp(("big",), f"k{i}", {"text": off_topic(i)}, ttl=0.02)  # 1.2 s
        for i in range(SIZE)
    ]
    await store.abatch(ops)
    await fill(store, ("rest",), [f"d{i}" for i in range(5 * SIZE)])
    await analyze(service)
    await store.asearch(("big",), query="q1", limit=1)
    await store.await_index_builds()
    assert list((await namespace_indexes(service)).values()) == [True]
    await asyncio.sleep(1.5)

    report = await service.maintenance.gc()
    assert report.store_items_expired == SIZE
    assert await namespace_indexes(service) == {}


async def test_a_build_decided_before_an_erasure_never_lands_after_it(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    acme = store_of(service, "acme")
    await fill(acme, ("big",), [off_topic(i) for i in range(SIZE)])
    await fill(store_of(service, "default"), ("rest",), [f"d{i}" for i in range(5 * SIZE)])
    await analyze(service)
    gate = asyncio.Event()
    original = LangGraphStoreRepository._build_index

    async def held(self: Any, *args: Any, **kwargs: Any) -> Any:
        await gate.wait()
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(LangGraphStoreRepository, "_build_index", held)
    await acme.asearch(("big",), query="q1", limit=1)  # decides to build, then waits
    receipt = await service.erase(Scope("acme"))
    gate.set()
    await acme.await_index_builds()
    assert receipt.verified
    assert await namespace_indexes(service) == {}


async def test_erasure_waits_for_builds_other_stores_started_and_neither_fails(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build of the erased tenant and one of another tenant, both in other store instances."""
    acme, globex = store_of(service, "acme"), store_of(service, "globex")
    other = store_of(service, "default")
    monkeypatch.setattr(langgraph_store, "NAMESPACE_INDEX_FROM", 10 * SIZE)  # searches build
    for store in (acme, globex, other):
        await fill(store, ("big",), [off_topic(i) for i in range(SIZE)])
    await fill(other, ("rest",), [f"d{i}" for i in range(5 * SIZE)])
    await analyze(service)
    monkeypatch.setattr(langgraph_store, "NAMESPACE_INDEX_FROM", SIZE - 50)
    await other.asearch(("big",), query="q1", limit=1)
    await other.await_index_builds()

    writer = await asyncpg.connect(service.dsn)
    try:
        # An open writer: every CREATE INDEX CONCURRENTLY waits for it.
        await writer.execute("BEGIN")
        await writer.execute(
            f"LOCK TABLE {service.settings.db_schema}.langgraph_store_vectors "
            "IN ROW EXCLUSIVE MODE"
        )
        await acme.asearch(("big",), query="q1", limit=1)
        await globex.asearch(("big",), query="q1", limit=1)
        await wait_for_waiting_build(service.dsn)
        erasing = asyncio.create_task(service.erase(Scope("acme")))
        await asyncio.sleep(1.0)
        await writer.execute("ROLLBACK")
        receipt = await asyncio.wait_for(erasing, timeout=120)
    finally:
        await writer.close()
    for store in (acme, globex):
        await store.await_index_builds()
        assert not store._repository._indexing_off
    assert receipt.verified, receipt.remaining
    assert await namespace_indexes(service) == {
        q.namespace_index_name("default", "big"): True,
        q.namespace_index_name("globex", "big"): True,
    }


async def test_a_namespace_that_crosses_the_threshold_gets_its_index_from_the_writes(
    service: MemoryService,
) -> None:
    store = store_of(service, "default")
    await fill(store, ("rest",), [f"d{i}" for i in range(5 * SIZE)])
    await analyze(service)
    await fill(store, ("big",), [off_topic(i) for i in range(SIZE)])  # no search at all
    await store.await_index_builds()
    assert await namespace_indexes(service) == {q.namespace_index_name("default", "big"): True}


async def test_a_table_walk_keeps_candidates_in_proportion_to_the_namespace_share(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Half the table: the walk finds a vector of the namespace every other step.
    monkeypatch.setattr(langgraph_store, "NAMESPACE_INDEX_FROM", 10 * SIZE)
    store = store_of(service, "default")
    await fill(store, ("half",), [off_topic(i) for i in range(SIZE)])
    await fill(store, ("rest",), [f"d{i}" for i in range(SIZE)])
    await analyze(service)
    seen: list[tuple[str, list[object]]] = []
    original = LangGraphStoreRepository._scan

    async def recorded(self: Any, sql: str, values: list[object], conn: Any) -> Any:
        seen.append((sql, list(values)))
        return await original(self, sql, values, conn)

    monkeypatch.setattr(LangGraphStoreRepository, "_scan", recorded)
    assert len(await store.asearch(("half",), query="q1", filter=EVERY, limit=10)) == 10
    sql, values = seen[-1]
    async with service.pool.acquire() as conn, conn.transaction():
        await conn.fetch(sql, *values)
        ef_search = int(await conn.fetchval("SHOW hnsw.ef_search"))
    assert ef_search < service.settings.hnsw_ef_search


async def test_erasure_finds_indexes_the_catalog_lacks_by_their_predicates(
    service: MemoryService,
) -> None:
    """An index built before the catalog existed: found by reading its predicate as values."""
    schema = service.settings.db_schema
    tenants = ("b\\ack'slash", "b\\ack'slash2", "plain")
    for tenant in tenants:
        await fill(store_of(service, tenant), ("n", "it's"), [off_topic(i) for i in range(3)])
    async with service.pool.acquire() as conn:
        for tenant in tenants:
            await conn.execute(
                iq.create_index(
                    schema,
                    iq.namespace_index_name(tenant, "n.it's"),
                    tenant,
                    "n.it's",
                    store_vector_index_expression(service.settings),
                    OPCLASSES[("halfvec", service.settings.distance)],
                    service.settings.hnsw_m,
                    service.settings.hnsw_ef_construction,
                )
            )
        assert await conn.fetchval(f"SELECT count(*) FROM {schema}.{iq.CATALOG}") == 0
    receipt = await service.erase(Scope(tenants[0]))
    assert receipt.verified, receipt.remaining
    assert receipt.removed["namespace_indexes"] == 1
    assert set(await namespace_indexes(service)) == {
        iq.namespace_index_name(tenant, "n.it's") for tenant in tenants[1:]
    }


async def test_the_receipt_reads_index_definitions_and_a_second_erasure_finishes(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = store_of(service, "acme")
    await fill(store, ("big",), [off_topic(i) for i in range(SIZE)])
    await fill(store_of(service, "default"), ("rest",), [f"d{i}" for i in range(5 * SIZE)])
    await analyze(service)
    await store.asearch(("big",), query="q1", limit=1)
    await store.await_index_builds()
    assert list((await namespace_indexes(service)).values()) == [True]

    # Another process's index DDL holds the lock longer than the erasure waits.
    monkeypatch.setattr(langgraph_store_indexes, "DDL_WAIT_SECONDS", 0.5)
    holder = await asyncpg.connect(service.dsn)
    try:
        key = iq.lock_key(service.settings.db_schema)
        assert await holder.fetchval(iq.TRY_LOCK, key)
        receipt = await service.erase(Scope("acme"))
    finally:
        await holder.close()
    assert not receipt.verified
    assert receipt.remaining == {"namespace_indexes": 1}
    again = await service.erase(Scope("acme"))
    assert again.verified, again.remaining
    assert await namespace_indexes(service) == {}


@pytest.mark.parametrize(
    ("predicate", "conforming"),
    [
        ("((tenant_id = 'a\\b''c'::text) AND ((prefix = 'p''q\\'::text) OR "
         "((prefix >= 'p''q\\.'::text) AND (prefix < 'p''q\\/'::text))))", True),
        ("((tenant_id = 'a\\\\b''c'::text) AND ((prefix = 'p''q\\\\'::text) OR "
         "((prefix >= 'p''q\\\\.'::text) AND (prefix < 'p''q\\\\/'::text))))", False),
    ],
)
def test_a_predicate_reads_back_as_the_values_it_was_written_from(
    predicate: str, conforming: bool
) -> None:
    # As pg_get_expr writes them with standard_conforming_strings on and off.
    assert iq.read_predicate(predicate, conforming) == ("a\\b'c", "p'q\\")
    assert iq.read_predicate(predicate.replace("p''q", "p''x", 1), conforming) is None
    assert iq.read_predicate("(tenant_id = 'a'::text)", True) is None


async def test_right_after_an_import_searches_walk_and_the_statistics_are_gathered(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planner's statistics predate a namespace just put: it would read it whole.

    The search that counts it walks the graph (planned without sorts) and
    has the statistics gathered; later searches plan as usual.
    """
    monkeypatch.setattr(langgraph_store, "NAMESPACE_INDEX_FROM", 10 * SIZE)  # no index
    store = store_of(service, "default")
    await fill(store, ("rest",), [f"d{i}" for i in range(3 * SIZE)])
    await analyze(service)
    monkeypatch.setattr(langgraph_store, "WRITES_PER_COUNT", 10**9)  # the writes count nothing
    monkeypatch.setattr(langgraph_store, "ANALYZE_SECONDS", 0.0)  # (the fill's counts ran one)
    schema = service.settings.db_schema
    # Nor does autovacuum's analyze, which the new rows could start meanwhile.
    vectors = f"{schema}.langgraph_store_vectors"
    async with service.pool.acquire() as conn:
        await conn.execute(f"ALTER TABLE {vectors} SET (autovacuum_enabled = false)")
    try:
        await search_right_after_an_import(service, store, monkeypatch)
    finally:
        async with service.pool.acquire() as conn:
            await conn.execute(f"ALTER TABLE {vectors} RESET (autovacuum_enabled)")


async def search_right_after_an_import(
    service: MemoryService, store: MemsvcStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await fill(store, ("big",), [off_topic(i) for i in range(2 * SIZE)])
    schema = service.settings.db_schema
    estimate_sql = (
        f"EXPLAIN (FORMAT JSON) SELECT 1 FROM {schema}.langgraph_store_vectors AS v "
        f"WHERE v.tenant_id = 'default' AND {q.namespace_literal_condition('big', 'v')}"
    )

    async def estimated_rows() -> float:
        async with service.pool.acquire() as conn:
            plan = json.loads(await conn.fetchval(estimate_sql))
        return float(plan[0]["Plan"]["Plan Rows"])

    assert await estimated_rows() < SIZE  # the statistics do not know it
    walks: list[str] = []
    original = LangGraphStoreRepository._scan_walking

    async def recorded(self: Any, sql: str, values: list[object], conn: Any) -> Any:
        walks.append(sql)
        return await original(self, sql, values, conn)

    monkeypatch.setattr(LangGraphStoreRepository, "_scan_walking", recorded)
    # (Unfiltered: 1,200 vectors among 3,000 are too many for the sign bits' plan.)
    assert len(await store.asearch(("big",), query="q1", limit=10)) == 10
    assert len(walks) == 1
    await store.await_index_builds()
    assert await estimated_rows() >= SIZE
    assert len(await store.asearch(("big",), query="q2", limit=10)) == 10
    assert len(walks) == 1
