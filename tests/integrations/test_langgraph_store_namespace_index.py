"""MemsvcStore query searches in big namespaces: a partial HNSW index of their own.

A namespace of at least ``NAMESPACE_INDEX_FROM`` vectors holding at most
``NAMESPACE_INDEX_SHARE`` of the table gets its own index, built in the
background by the search that counts it; later searches walk that graph.
These tests lower the threshold so a few hundred items suffice, and check
the plan PostgreSQL really runs, not only the answers.
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

pytest.importorskip("langgraph.store.base", reason="needs the langgraph extra")

from langgraph.store.base import PutOp

from memsvc import MemoryService, Scope
from memsvc.db.hnsw_walks import own_graph_ef
from memsvc.integrations.langgraph import MemsvcStore
from memsvc.langgraph_db import store as langgraph_store
from memsvc.langgraph_db import store_queries as q
from memsvc.langgraph_db.store import LangGraphStoreRepository
from tests.integrations.test_langgraph_store_search import embed_function, exact

BIG = 700


@pytest.fixture
async def store(service: MemoryService, monkeypatch: pytest.MonkeyPatch) -> MemsvcStore:
    """A store whose namespace ``("big",)`` holds BIG items among five times as many.

    Filled with the threshold above BIG (no build starts from the writes),
    then lowered: the tests here start builds by searching.
    """
    monkeypatch.setattr(langgraph_store, "NAMESPACE_INDEX_FROM", 10 * BIG)
    dims = service.settings.embedding_dim
    store = MemsvcStore(
        service, index={"dims": dims, "embed": embed_function(dims), "fields": ["text"]}
    )
    ops = [PutOp(("big",), f"k{i}", {"text": f"d{i}", "i": i}) for i in range(BIG)]
    ops += [PutOp(("big", "sub"), f"s{i}", {"text": f"d{i + 5000}", "i": i}) for i in range(20)]
    # Inside the index's key range, outside the namespace: the search's recheck drops them.
    ops += [PutOp(("big-x",), f"x{i}", {"text": f"d{i + 7000}", "i": i}) for i in range(20)]
    ops += [PutOp(("rest",), f"r{i}", {"text": f"d{i + 6000}"}) for i in range(4 * BIG)]
    await store.abatch(ops)
    await store.await_index_builds()  # the counts its writes started
    async with service.pool.acquire() as conn:
        await conn.execute(f"ANALYZE {service.settings.db_schema}.langgraph_store_vectors")
        await conn.execute(f"ANALYZE {service.settings.db_schema}.langgraph_store_items")
    monkeypatch.setattr(langgraph_store, "NAMESPACE_INDEX_FROM", BIG - 50)
    return store


async def namespace_indexes(service: MemoryService) -> dict[str, bool]:
    schema = service.settings.db_schema
    async with service.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT c.relname, x.indisvalid FROM pg_index AS x "
            "JOIN pg_class AS c ON c.oid = x.indexrelid "
            f"WHERE x.indrelid = '{schema}.langgraph_store_vectors'::regclass "
            "AND c.relname LIKE 'ix\\_langgraph\\_store\\_ns\\_%'"
        )
    return {row["relname"]: row["indisvalid"] for row in rows}


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[object]]]:
    """The graph searches' statements and arguments (they still run for real)."""
    seen: list[tuple[str, list[object]]] = []
    original = LangGraphStoreRepository._scan

    async def recorded(self: Any, sql: str, values: list[object], conn: Any) -> Any:
        seen.append((sql, list(values)))
        return await original(self, sql, values, conn)

    monkeypatch.setattr(LangGraphStoreRepository, "_scan", recorded)
    return seen


async def test_a_big_namespace_gets_its_own_index_and_searches_walk_it(
    store: MemsvcStore,
    service: MemoryService,
    statements: list[tuple[str, list[object]]],
) -> None:
    name = q.namespace_index_name("default", "big")
    assert await namespace_indexes(service) == {}
    # Small namespaces and the whole table start no build.
    await store.asearch(("rest",), query="q0", limit=5)
    await store.asearch((), query="q0", limit=5)
    await store.await_index_builds()
    assert await namespace_indexes(service) == {}

    before = await store.asearch(("big",), query="q1", limit=10)
    await store.await_index_builds()
    assert await namespace_indexes(service) == {name: True}

    statements.clear()
    found = wanted = 0
    for i in range(10):
        query = f"q{i}"
        truth = await exact(service, query, "big")
        hits = await store.asearch(("big",), query=query, limit=10)
        assert len(hits) == 10
        assert all(h.namespace in (("big",), ("big", "sub")) for h in hits)
        distances = dict(truth)
        for hit in hits:
            assert hit.score == pytest.approx(1.0 - distances[hit.key], abs=1e-5)
        found += len({k for k, _ in truth[:10]} & {h.key for h in hits})
        wanted += 10
        if query == "q1":
            assert [h.key for h in hits] == [h.key for h in before]
    assert found / wanted >= 0.95

    # PostgreSQL walks the namespace's index (not the table's) for these statements.
    sql, values = statements[-1]
    async with service.pool.acquire() as conn:
        plan = "\n".join(row[0] for row in await conn.fetch("EXPLAIN " + sql, *values))
    assert name in plan, plan


async def test_filtered_searches_in_an_indexed_namespace_return_full_pages(
    store: MemsvcStore, service: MemoryService
) -> None:
    await store.asearch(("big",), query="q0", limit=1)
    await store.await_index_builds()
    assert all((await namespace_indexes(service)).values())
    for query in ("q2", "q5"):
        hits = await store.asearch(("big",), query=query, filter={"i": {"$lt": 40}}, limit=10)
        assert len(hits) == 10 and all(h.value["i"] < 40 for h in hits)
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)  # type: ignore[type-var]
        # Offsets past the matches end the pages, never skipping one.
        rest = await store.asearch(
            ("big",), query=query, filter={"i": {"$lt": 40}}, limit=100, offset=10
        )
        matching = 40 + 20  # 40 of ("big",), 20 of ("big", "sub"); ("big-x",) is elsewhere
        assert len(rest) == matching - 10


async def test_erasing_a_tenant_drops_its_namespace_indexes_only(
    store: MemsvcStore, service: MemoryService
) -> None:
    dims = service.settings.embedding_dim
    other = MemsvcStore(
        service,
        index={"dims": dims, "embed": embed_function(dims), "fields": ["text"]},
        tenant="acme",
    )
    await other.abatch([PutOp(("big",), f"a{i}", {"text": f"d{i}"}) for i in range(BIG)])
    # Its writes started its build: an ANALYZE while a build runs ends one of them.
    await other.await_index_builds()
    async with service.pool.acquire() as conn:
        await conn.execute(f"ANALYZE {service.settings.db_schema}.langgraph_store_vectors")
        await conn.execute(f"ANALYZE {service.settings.db_schema}.langgraph_store_items")
    for each in (store, other):
        await each.asearch(("big",), query="q0", limit=1)
        await each.await_index_builds()
    mine, theirs = q.namespace_index_name("default", "big"), q.namespace_index_name("acme", "big")
    assert await namespace_indexes(service) == {mine: True, theirs: True}

    receipt = await service.erase(Scope("acme"))
    assert receipt.verified and receipt.removed["langgraph_store_items"] == BIG
    assert await namespace_indexes(service) == {mine: True}
    assert len(await store.asearch(("big",), query="q0", limit=10)) == 10
    # The store's own tenant deletion drops them too.
    await store._repository.delete_tenant("default")
    assert await namespace_indexes(service) == {}


async def test_a_failed_build_turns_builds_off_and_searches_keep_their_plans(
    store: MemsvcStore, service: MemoryService
) -> None:
    repository = store._repository
    # pgvector refuses m = 1: the build fails in the database, as a role that
    # does not own the table would make it fail.
    repository._settings = service.settings.model_copy(update={"hnsw_m": 1})
    first = await store.asearch(("big",), query="q4", limit=10)
    await store.await_index_builds()
    assert await namespace_indexes(service) == {}
    assert repository._indexing_off
    repository._sizes.clear()  # count again: no second build starts
    again = await store.asearch(("big",), query="q4", limit=10)
    assert repository._building is None
    assert [h.key for h in again] == [h.key for h in first] and len(again) == 10
    hits = await store.asearch(("big",), query="q4", filter={"i": {"$lt": 40}}, limit=10)
    assert len(hits) == 10 and all(h.value["i"] < 40 for h in hits)


async def test_closing_the_service_cancels_a_build_and_the_next_one_replaces_it(
    store: MemsvcStore, service: MemoryService
) -> None:
    """A build waits for older writers; closing does not wait for it (minutes when large)."""
    table = f"{service.settings.db_schema}.langgraph_store_vectors"
    name = q.namespace_index_name("default", "big")
    writer = await asyncpg.connect(service.dsn)
    try:
        # An open writer's lock: CREATE INDEX CONCURRENTLY waits until it ends.
        writer_transaction = writer.transaction()
        await writer_transaction.start()
        await writer.execute(f"LOCK TABLE {table} IN ROW EXCLUSIVE MODE")
        await store.asearch(("big",), query="q1", limit=10)
        await wait_for_waiting_build(service.dsn)

        await asyncio.wait_for(service.close(), timeout=60)
        await writer_transaction.rollback()
        assert await namespace_indexes_at(service.dsn, service.settings.db_schema) in (
            {},
            {name: False},  # the cancelled build's leftover
        )
    finally:
        await writer.close()

    async with MemoryService.open(service.settings) as reopened:
        dims = reopened.settings.embedding_dim
        again = MemsvcStore(
            reopened, index={"dims": dims, "embed": embed_function(dims), "fields": ["text"]}
        )
        assert len(await again.asearch(("big",), query="q1", limit=10)) == 10
        await again.await_index_builds()
        assert await namespace_indexes(reopened) == {name: True}


async def wait_for_waiting_build(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        for _ in range(600):
            waiting = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE query LIKE 'CREATE INDEX CONCURRENTLY%' AND wait_event_type = 'Lock'"
            )
            if waiting:
                return
            await asyncio.sleep(0.05)
        raise AssertionError("the namespace index build never started")
    finally:
        await conn.close()


async def namespace_indexes_at(dsn: str, schema: str) -> dict[str, bool]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT c.relname, x.indisvalid FROM pg_index AS x "
            "JOIN pg_class AS c ON c.oid = x.indexrelid "
            f"WHERE x.indrelid = '{schema}.langgraph_store_vectors'::regclass "
            "AND c.relname LIKE 'ix\\_langgraph\\_store\\_ns\\_%'"
        )
    finally:
        await conn.close()
    return {row["relname"]: row["indisvalid"] for row in rows}


async def test_an_indexed_namespace_walk_sets_its_own_ef_search_for_its_statement_only(
    store: MemsvcStore,
    service: MemoryService,
    statements: list[tuple[str, list[object]]],
) -> None:
    await store.asearch(("big",), query="q0", limit=1)
    await store.await_index_builds()
    configured = str(service.settings.hnsw_ef_search)
    wanted = str(
        own_graph_ef(int(10 * langgraph_store.SCAN_FACTOR), service.settings.hnsw_ef_search)
    )
    assert wanted != configured
    statements.clear()
    assert len(await store.asearch(("big",), query="q3", limit=10)) == 10
    sql, values = statements[-1]
    async with service.pool.acquire() as conn:
        # Within the statement's transaction the walk's setting holds...
        async with conn.transaction():
            await conn.fetch(sql, *values)
            assert await conn.fetchval("SHOW hnsw.ef_search") == wanted
        # ...and ends with it.
        assert await conn.fetchval("SHOW hnsw.ef_search") == configured

        # The setting is made before the walk starts: without iterative scans
        # a walk returns at most ef_search vectors.
        tiny = q.search_items(
            service.settings.db_schema,
            q.namespace_literal_condition("big"),
            "true",
            service.settings.distance,
            "$2",
            50,
            "$3",
            "$4",
            half_dims=service.settings.embedding_dim
            if service.settings.vector_type == "vector"
            else None,
            tenant="default",
            ef_search=3,
        )
        async with conn.transaction():
            await conn.execute("SET LOCAL hnsw.iterative_scan = off")
            rows = await conn.fetch(tiny, "default", values[1], 10, 0)
        assert rows[0]["scanned"] == 3

    # A caller's connection (its own transaction) is left as it was.
    vector = [0.0] * service.settings.embedding_dim
    vector[0] = 1.0
    async with service.pool.acquire() as conn, conn.transaction():
        found = await store._repository.search(
            "default", "big", [], vector, limit=10, offset=0, conn=conn
        )
        assert len(found) == 10
        assert await conn.fetchval("SHOW hnsw.ef_search") == configured
