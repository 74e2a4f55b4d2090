"""MemsvcStore: LangGraph's BaseStore on memsvc, against real PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

pytest.importorskip("langgraph.store.base", reason="needs the langgraph extra")

from langgraph.store.base import PutOp, SearchOp

from memsvc import MemoryService, Scope, Settings, ValidationError
from memsvc.embedding import HashingEmbedder
from memsvc.integrations.langgraph import MemsvcStore
from memsvc.langgraph_db.store import LangGraphStoreRepository
from memsvc.sync import SyncMemoryService
from memsvc.testing.postgres import settings_for_tests
from tests.test_row_level_security import rls_database  # noqa: F401 (a fixture)


def embed_function(dim: int):  # type: ignore[no-untyped-def]
    embedder = HashingEmbedder(dim)

    def embed(texts: Sequence[str]) -> list[list[float]]:
        return [embedder.embed_one(text).tolist() for text in texts]

    return embed


@pytest.fixture
def store(service: MemoryService) -> MemsvcStore:
    dims = service.settings.embedding_dim
    return MemsvcStore(
        service, index={"dims": dims, "embed": embed_function(dims), "fields": ["text"]}
    )


async def test_put_get_delete_round_trip(store: MemsvcStore) -> None:
    await store.aput(("users", "u1", "prefs"), "units", {"text": "metric", "n": 1})
    item = await store.aget(("users", "u1", "prefs"), "units")
    assert item is not None
    assert item.value == {"text": "metric", "n": 1}
    assert item.namespace == ("users", "u1", "prefs")
    first_created = item.created_at
    await store.aput(("users", "u1", "prefs"), "units", {"text": "imperial", "n": 2})
    again = await store.aget(("users", "u1", "prefs"), "units")
    assert again is not None and again.value["text"] == "imperial"
    assert again.created_at == first_created and again.updated_at >= first_created
    await store.adelete(("users", "u1", "prefs"), "units")
    assert await store.aget(("users", "u1", "prefs"), "units") is None


async def test_search_by_prefix_and_filter_compares_numbers_as_numbers(
    store: MemsvcStore,
) -> None:
    for n in (2, 9, 10, 100):
        await store.aput(("docs", "a"), f"k{n}", {"text": f"doc {n}", "n": n, "tag": "x"})
    await store.aput(("docs", "b"), "other", {"text": "b", "n": 50, "tag": "y"})
    await store.aput(("docsx",), "lookalike", {"text": "not under docs", "n": 1})
    under = await store.asearch(("docs",), limit=10)
    assert {i.key for i in under} == {"k2", "k9", "k10", "k100", "other"}
    # As text '9' > '10'; as numbers it is not.
    gt = await store.asearch(("docs",), filter={"n": {"$gt": 9}}, limit=10)
    assert {i.key for i in gt} == {"k10", "k100", "other"}
    between = await store.asearch(("docs",), filter={"n": {"$gte": 9, "$lt": 100}, "tag": "x"})
    assert {i.key for i in between} == {"k9", "k10"}
    ne = await store.asearch(("docs", "a"), filter={"n": {"$ne": 2}})
    assert {i.key for i in ne} == {"k9", "k10", "k100"}


async def test_search_without_query_lists_the_most_recent_first(store: MemsvcStore) -> None:
    for key in ("a", "b", "c"):
        await store.aput(("ns",), key, {"text": key})
    await store.aput(("ns",), "a", {"text": "a again"})
    page = await store.asearch(("ns",), limit=2)
    assert [i.key for i in page] == ["a", "c"]
    assert [i.key for i in await store.asearch(("ns",), limit=2, offset=2)] == ["b"]


async def test_semantic_search_ranks_by_the_nearest_indexed_field(store: MemsvcStore) -> None:
    await store.aput(("m",), "one", {"text": "the user prefers metric units"})
    await store.aput(("m",), "two", {"text": "the cat sat on the mat"})
    await store.aput(("m",), "skip", {"text": "the user prefers metric units"}, index=False)
    hits = await store.asearch(("m",), query="the user prefers metric units", limit=5)
    assert [h.key for h in hits] == ["one", "two"]
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert hits[1].score is not None and hits[1].score < hits[0].score


async def test_filtered_semantic_search_returns_full_pages(store: MemsvcStore) -> None:
    ops = [
        PutOp(("big",), f"k{i}", {"text": f"item {i}", "even": i % 2 == 0, "i": i})
        for i in range(300)
    ]
    await store.abatch(ops)
    hits = await store.asearch(("big",), query="item 7", filter={"i": {"$gte": 290}}, limit=10)
    assert len(hits) == 10 and all(h.value["i"] >= 290 for h in hits)


async def test_list_namespaces_prefix_suffix_depth_and_paging(store: MemsvcStore) -> None:
    for ns in [("a", "b", "c"), ("a", "b", "d"), ("a", "e"), ("x", "b", "c"), ("a!",)]:
        await store.aput(ns, "k", {"text": "v"})
    assert await store.alist_namespaces() == [
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("a", "e"),
        ("a!",),
        ("x", "b", "c"),
    ]
    assert await store.alist_namespaces(prefix=("a", "*")) == [
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("a", "e"),
    ]
    assert await store.alist_namespaces(suffix=("b", "c")) == [("a", "b", "c"), ("x", "b", "c")]
    assert await store.alist_namespaces(max_depth=1) == [("a",), ("a!",), ("x",)]
    assert await store.alist_namespaces(limit=2, offset=1) == [("a", "b", "d"), ("a", "e")]
    await store.adelete(("a", "e"), "k")  # an emptied namespace is no longer listed
    assert ("a", "e") not in await store.alist_namespaces()


async def test_tenants_do_not_see_each_other(service: MemoryService) -> None:
    mine = MemsvcStore(service, tenant="acme")
    theirs = MemsvcStore(service, tenant="globex")
    await mine.aput(("ns",), "k", {"v": 1})
    assert await theirs.aget(("ns",), "k") is None
    assert await theirs.asearch(("ns",)) == []
    assert await theirs.alist_namespaces() == []


async def test_ttl_expires_refreshes_on_read_and_is_swept(service: MemoryService) -> None:
    store = MemsvcStore(service, ttl={"default_ttl": 1, "refresh_on_read": True})
    # TTLs are minutes in LangGraph: 0.02 is 1.2 s, long enough that a loaded
    # machine's scheduling delays (tens of ms) cannot decide the outcome.
    await store.aput(("t",), "short", {"v": 1}, ttl=0.02)
    await store.aput(("t",), "kept", {"v": 2}, ttl=None)
    await store.aput(("t",), "default", {"v": 3})
    async with service.pool.acquire() as conn:
        ttls = dict(await conn.fetch("SELECT key, ttl_minutes FROM memsvc.langgraph_store_items"))
    assert ttls == {"short": 0.02, "kept": None, "default": 1.0}
    # Reads refresh the TTL: read "short" more often than it lives, for longer
    # than it lives (2 s), and it stays.
    for _ in range(4):
        await asyncio.sleep(0.5)
        assert await store.aget(("t",), "short") is not None
    # Without refresh, it expires and is invisible before any sweep.
    await asyncio.sleep(1.5)
    assert await store.aget(("t",), "short", refresh_ttl=False) is None
    assert {i.key for i in await store.asearch(("t",))} == {"kept", "default"}
    assert await store.asweep_ttl() == 1
    async with service.pool.acquire() as conn:
        left = await conn.fetchval("SELECT count(*) FROM memsvc.langgraph_store_items")
    assert left == 2


@pytest.mark.parametrize("ttl", [1e12, 365_000 * 24 * 60 + 1, float("inf"), 0])
async def test_a_ttl_past_the_limit_is_refused_and_the_store_stays_readable(
    service: MemoryService, ttl: float
) -> None:
    store = MemsvcStore(service)
    await store.aput(("t",), "kept", {"v": 1}, ttl=60)
    with pytest.raises(ValidationError) as raised:
        await store.aput(("t",), "forever", {"v": 2}, ttl=ttl)
    assert raised.value.field == "ttl"
    assert [item.key for item in await store.asearch(("t",))] == ["kept"]
    await store.aput(("t",), "longest", {"v": 3}, ttl=365_000 * 24 * 60)
    assert (await store.aget(("t",), "longest")) is not None


async def test_ttl_sweeper_runs_on_the_loop(service: MemoryService) -> None:
    store = MemsvcStore(service)
    await store.aput(("t",), "gone", {"v": 1}, ttl=0.001)
    await asyncio.sleep(0.1)
    store.start_ttl_sweeper(sweep_interval_minutes=0.001)
    for _ in range(50):
        async with service.pool.acquire() as conn:
            if not await conn.fetchval("SELECT count(*) FROM memsvc.langgraph_store_items"):
                break
        await asyncio.sleep(0.05)
    await store.stop_ttl_sweeper()
    async with service.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM memsvc.langgraph_store_items") == 0


async def test_sync_methods_work_from_other_threads(store: MemsvcStore) -> None:
    def work() -> list[str]:
        store.put(("sync",), "k", {"text": "hello"})
        assert store.get(("sync",), "k") is not None
        found = [i.key for i in store.search(("sync",), query="hello")]
        store.delete(("sync",), "k")
        return found

    assert await asyncio.to_thread(work) == ["k"]
    assert await store.aget(("sync",), "k") is None


async def test_sync_methods_refuse_the_service_loop(store: MemsvcStore) -> None:
    with pytest.raises(RuntimeError, match="async"):
        store.get(("ns",), "k")


async def test_bad_input_is_refused_and_nothing_written(store: MemsvcStore) -> None:
    with pytest.raises(ValidationError, match="value"):
        await store.abatch([PutOp(("ok",), "a", {"v": 1}), PutOp(("ok",), "b", {"v": "\x00"})])
    assert await store.asearch(("ok",)) == []
    with pytest.raises(ValidationError, match="namespace"):
        await store.abatch([PutOp(("a.b",), "k", {"v": 1})])
    with pytest.raises(ValidationError, match="filter"):  # a bad read in the batch
        await store.abatch(
            [PutOp(("ok",), "a", {"v": 1}), SearchOp(("ok",), filter={"v": {"$in": [1]}})]
        )
    assert await store.asearch(("ok",)) == []
    with pytest.raises(ValidationError, match="filter"):
        await store.asearch(("ok",), filter={"v": {"$regex": "x"}})
    with pytest.raises(ValidationError, match="limit"):
        await store.asearch(("ok",), limit=-1)
    with pytest.raises(ValidationError, match=r"index\.dims"):
        MemsvcStore(store._svc, index={"dims": 3, "embed": embed_function(3)})


async def test_concurrent_puts_to_one_key_leave_one_whole_item(store: MemsvcStore) -> None:
    async def put(i: int) -> None:
        await store.aput(("race",), "k", {"text": f"writer {i}", "i": i})

    await asyncio.gather(*(put(i) for i in range(20)))
    item = await store.aget(("race",), "k")
    assert item is not None
    async with store._svc.pool.acquire() as conn:
        vectors = await conn.fetchval("SELECT count(*) FROM memsvc.langgraph_store_vectors")
    assert vectors == 1
    hits = await store.asearch(("race",), query=item.value["text"])
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)


async def test_racing_puts_with_and_without_an_indexed_field_leave_matching_vectors(
    store: MemsvcStore,
) -> None:
    # Every other writer's value lacks the indexed field (so has no vector): the
    # item left must carry exactly the vectors of its own value, none of a loser's.
    async def put(i: int) -> None:
        value = {"text": f"writer {i}"} if i % 2 else {"note": f"writer {i}"}
        await store.aput(("race",), "k", value)

    for _ in range(3):
        await asyncio.gather(*(put(i) for i in range(20)))
        item = await store.aget(("race",), "k")
        assert item is not None
        async with store._svc.pool.acquire() as conn:
            vectors = await conn.fetchval("SELECT count(*) FROM memsvc.langgraph_store_vectors")
        assert vectors == (1 if "text" in item.value else 0)


async def test_a_put_with_unchanged_text_leaves_the_vector_row_alone(store: MemsvcStore) -> None:
    async def vector_versions() -> list[str]:
        async with store._svc.pool.acquire() as conn:
            rows = await conn.fetch(
                "SELECT xmin::text AS version FROM memsvc.langgraph_store_vectors ORDER BY key"
            )
        return [row["version"] for row in rows]

    await store.aput(("keep",), "k", {"text": "same words", "n": 1})
    first = await vector_versions()
    await store.aput(("keep",), "k", {"text": "same words", "n": 2})
    assert await vector_versions() == first  # no new row version, nothing new in HNSW
    assert (await store.aget(("keep",), "k")).value["n"] == 2  # type: ignore[union-attr]
    await store.aput(("keep",), "k", {"text": "other words", "n": 3})
    changed = await vector_versions()
    assert len(changed) == 1 and changed != first
    hits = await store.asearch(("keep",), query="other words")
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    await store.aput(("keep",), "k", {"note": "no indexed field"})
    assert await vector_versions() == []


async def test_concurrent_puts_to_distinct_keys_lose_nothing(store: MemsvcStore) -> None:
    await asyncio.gather(*(store.aput(("many",), f"k{i}", {"text": str(i)}) for i in range(50)))
    assert len(await store.asearch(("many",), limit=100)) == 50


async def test_store_items_show_in_stats_and_expired_ones_go_with_gc(
    service: MemoryService,
) -> None:
    store = MemsvcStore(service, tenant="acme")
    await store.aput(("ns",), "live", {"v": 1})
    await store.aput(("ns",), "short", {"v": 2}, ttl=0.001)
    await asyncio.sleep(0.1)
    stats = await service.maintenance.stats(tenant="acme")
    (acme,) = stats.tenants
    assert (acme.store_items, acme.store_items_expired) == (2, 1)
    report = await service.maintenance.gc()
    assert report.store_items_expired == 1
    (acme,) = (await service.maintenance.stats(tenant="acme")).tenants
    assert (acme.store_items, acme.store_items_expired) == (1, 0)
    assert await store.aget(("ns",), "live") is not None


async def test_export_then_import_restores_store_items_with_their_vectors(
    store: MemsvcStore, tmp_path: Path
) -> None:
    service = store._svc
    await store.aput(("users", "u1"), "a", {"text": "metric units", "n": 1.5})
    await store.aput(("users", "u2"), "b", {"text": "the cat sat"}, ttl=60)
    path = tmp_path / "export.jsonl"
    with path.open("w") as out:
        report = await service.maintenance.export(out)
    assert report.store_items == 2
    with path.open("w") as out:  # a deeper scope holds no store items
        assert (await service.maintenance.export(out, scope=Scope("default", "p"))).store_items == 0
    with path.open("w") as out:
        await service.maintenance.export(out, scope=Scope("default"))
    async with service.pool.acquire() as conn:
        before = await conn.fetch(
            "SELECT prefix, key, value, created_at, expires_at, ttl_minutes"
            " FROM memsvc.langgraph_store_items ORDER BY key"
        )
        await conn.execute("DELETE FROM memsvc.langgraph_store_items")
    loaded = await service.maintenance.import_file(path)
    assert loaded.ok and loaded.store_items.inserted == 2
    async with service.pool.acquire() as conn:
        after = await conn.fetch(
            "SELECT prefix, key, value, created_at, expires_at, ttl_minutes"
            " FROM memsvc.langgraph_store_items ORDER BY key"
        )
    assert after == before
    hits = await store.asearch(("users",), query="metric units")
    assert hits[0].key == "a" and hits[0].score == pytest.approx(1.0, abs=1e-5)
    again = await service.maintenance.import_file(path)
    assert again.store_items.already_present == 2


async def test_store_works_under_row_level_security(
    rls_database: tuple[str, str],  # noqa: F811 (the fixture)
) -> None:
    _, runtime_dsn = rls_database
    await check_store_under_row_level_security(
        settings_for_tests(runtime_dsn, row_level_security=True)
    )


async def check_store_under_row_level_security(settings: Settings) -> None:
    """Two tenants' stores under a runtime role: each sees, finds and sweeps its own items."""
    dims = settings.embedding_dim
    index = {"dims": dims, "embed": embed_function(dims), "fields": ["text"]}
    async with MemoryService.open(settings) as service:
        acme = MemsvcStore(service, index=index, tenant="acme")  # type: ignore[arg-type]
        globex = MemsvcStore(service, index=index, tenant="globex")  # type: ignore[arg-type]
        # globex's put first: the service's first write (connections, on a
        # cluster the workers' too) does not eat into acme's 0.6 s.
        await globex.aput(("ns",), "k", {"text": "globex secret"})
        await acme.aput(("ns",), "k", {"text": "acme secret"}, ttl=0.01)  # 0.6 s
        item = await acme.aget(("ns",), "k", refresh_ttl=False)
        assert item is not None and item.value["text"] == "acme secret"
        hits = await globex.asearch(("ns",), query="acme secret")
        assert [h.value["text"] for h in hits] == ["globex secret"]
        assert await globex.alist_namespaces() == [("ns",)]
        await asyncio.sleep(0.7)
        assert await acme.asweep_ttl() == 1
        assert await globex.aget(("ns",), "k") is not None


async def test_namespaces_with_quotes_and_backslashes_search_safely(store: MemsvcStore) -> None:
    odd = ("it's", "back\\slash", "'); DROP TABLE x; --")
    await store.aput(odd, "k", {"text": "odd namespace"})
    await store.aput(("other",), "k", {"text": "odd namespace"})
    hits = await store.asearch(odd[:2], query="odd namespace")
    assert [(h.namespace, h.key) for h in hits] == [(odd, "k")]
    assert await store.alist_namespaces(prefix=odd[:1]) == [odd]


async def test_erasing_a_tenant_removes_its_items_and_vectors_only(store: MemsvcStore) -> None:
    other = MemsvcStore(store._svc, index=store.index_config, tenant="other")
    await store.aput(("ns",), "a", {"text": "mine"})
    await other.aput(("ns",), "b", {"text": "theirs"})
    repository = LangGraphStoreRepository(store._svc.pool, store._svc.settings)
    assert await repository.delete_tenant("default") == 1
    async with store._svc.pool.acquire() as conn:
        left = await conn.fetch("SELECT tenant_id FROM memsvc.langgraph_store_vectors")
    assert [row["tenant_id"] for row in left] == ["other"]
    assert await other.aget(("ns",), "b") is not None


def test_the_store_takes_the_blocking_client_from_threads_and_other_loops(
    settings: Settings,
) -> None:
    with SyncMemoryService.open(settings) as client:
        dims = client.settings.embedding_dim
        store = MemsvcStore(
            client, index={"dims": dims, "embed": embed_function(dims), "fields": ["text"]}
        )
        store.put(("docs",), "a", {"text": "metric units"})  # from this plain thread
        assert store.get(("docs",), "a").value == {"text": "metric units"}

        async def on_a_loop_of_its_own() -> list[str]:
            await store.aput(("docs",), "b", {"text": "imperial units"})
            return [item.key for item in await store.asearch(("docs",), query="units")]

        assert sorted(asyncio.run(on_a_loop_of_its_own())) == ["a", "b"]


@pytest.mark.parametrize("given", [object(), None])
def test_anything_but_a_client_is_a_type_error_saying_what_to_pass(given: object) -> None:
    with pytest.raises(TypeError, match=r"MemoryService or memsvc\.sync\.SyncMemoryService"):
        MemsvcStore(given)  # type: ignore[arg-type]
