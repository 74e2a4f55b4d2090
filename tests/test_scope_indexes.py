"""Scope indexes of memories over their life: built, used, rebuilt, dropped, capped.

A big exact scope gets a partial HNSW index of its own, whose predicate
names the scope's ids: searches of that scope must walk it (EXPLAIN says
so) and still return what an exact scan returns, full pages under filters
included; it must go when the scope empties or is erased (the receipt's
check reads index definitions), come back when a build left it invalid, and
never exceed the cap, whose scopes are still searched right.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import numpy as np
import pytest

from memsvc import MemoryService, Scope
from memsvc.core.scope import Include
from memsvc.db.hnsw_walks import OWN_GRAPH_SIZED_UP_TO
from memsvc.db.index_ddl import BULK_LOCK_KEY
from memsvc.memories import scope_index_queries as q
from memsvc.testing.postgres import TestPostgres, settings_for_tests

DIM = 384
BIG = 5_000  # vectors of an indexed scope
FROM = 4_000  # Settings.scope_index_from in these tests
FILLED = Scope("acme", "big")
SMALL = Scope("acme", "small")


def vectors(seed: int, count: int) -> np.ndarray:
    """Unit vectors near a 24-dimensional subspace, as embeddings of texts lie.

    (Uniformly random 384-dimensional vectors have no neighbourhoods to
    speak of: no graph index finds their nearest ones well, the table's
    included.)
    """
    basis = np.random.default_rng(0).standard_normal((24, DIM))
    rng = np.random.default_rng(seed)
    found = rng.standard_normal((count, 24)) @ basis + 0.3 * rng.standard_normal((count, DIM))
    found = found.astype(np.float32)
    return found / np.linalg.norm(found, axis=1, keepdims=True)


async def fill(svc: MemoryService, scope: Scope, count: int, seed: int) -> None:
    rows = vectors(seed, count)
    for start in range(0, count, 500):
        await svc.memories.add_many(
            scope,
            [
                {"content": f"{scope.levels} {i}", "embedding": rows[i], "metadata": {"b": i % 4}}
                for i in range(start, min(count, start + 500))
            ],
        )


async def analyze(svc: MemoryService) -> None:
    async with svc.pool.acquire() as conn:
        await conn.execute(f"ANALYZE {svc.settings.db_schema}.memories")


async def present(svc: MemoryService) -> dict[str, bool]:
    """The scope indexes the table has, and whether each is valid."""
    async with svc.pool.acquire() as conn:
        rows = await conn.fetch(q.scope_indexes(svc.settings.db_schema))
    return {row["name"]: row["valid"] for row in rows}


async def catalog(svc: MemoryService) -> dict[str, str]:
    async with svc.pool.acquire() as conn:
        rows = await conn.fetch(q.every_row(svc.settings.db_schema))
    return {row["index_name"]: row["state"] for row in rows}


async def counted(svc: MemoryService) -> dict[str, int | None]:
    """The vectors the catalog last counted in each index."""
    async with svc.pool.acquire() as conn:
        rows = await conn.fetch(q.every_row(svc.settings.db_schema))
    return {row["index_name"]: row["vectors"] for row in rows}


async def until_indexed(
    svc: MemoryService, scope: Scope, indexed: bool = True, include: Include = "exact"
) -> None:
    """Until this service's searches know ``scope``'s index (read in the background)."""
    for _ in range(100):
        if svc.memories.scope_indexes.indexed(scope, include) == indexed:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"searches never learned that {scope} is indexed: {indexed}")


@pytest.fixture
async def svc(memsvc_database_url: str) -> AsyncIterator[MemoryService]:
    settings = settings_for_tests(
        memsvc_database_url, scope_index_from=FROM, scope_indexes_max=2
    )
    async with MemoryService.open(settings) as service:
        yield service


async def same_as_exact(
    svc: MemoryService, scope: Scope, queries: np.ndarray, where: dict[str, int] | None = None
) -> float:
    """Mean recall@10 of the plain search against the exact one; every page full."""
    recalls = []
    for query in queries:
        got = await svc.memories.search(scope, query, k=10, where=where)
        truth = await svc.memories.search(scope, query, k=10, where=where, plan="exact")
        assert len(got) == 10 == len(truth)  # no short page, filtered or not
        if where is not None:
            assert all(hit.memory.metadata["b"] == where["b"] for hit in got)
        assert all(hit.memory.scope == scope for hit in got)
        recalls.append(len({h.memory.id for h in got} & {h.memory.id for h in truth}) / 10)
    return float(np.mean(recalls))


async def test_a_big_scope_gets_its_own_index_and_its_searches_walk_it(
    svc: MemoryService,
) -> None:
    await fill(svc, FILLED, BIG, seed=1)
    await fill(svc, SMALL, 200, seed=2)
    await analyze(svc)
    report = await svc.maintenance.index_scopes()
    name = q.scope_index_name(FILLED)
    assert report.built == [FILLED] and report.skipped is None
    assert await present(svc) == {name: True}
    assert await catalog(svc) == {name: "ready"}
    query = vectors(3, 1)[0]
    plan = await svc.memories.explain_search(FILLED, query, k=10)
    assert f"Index Scan using {name}" in plan
    assert plan.endswith(f"Scope index of this scope: {name}")
    filtered = await svc.memories.explain_search(FILLED, query, k=10, where={"b": 1})
    assert f"Index Scan using {name}" in filtered
    # Another scope's search keeps its statement: no literal, no scope index.
    small = await svc.memories.explain_search(SMALL, query, k=10)
    assert q.SCOPE_INDEX_PREFIX not in small
    queries = vectors(4, 20)
    assert await same_as_exact(svc, FILLED, queries) >= 0.95
    assert await same_as_exact(svc, FILLED, queries, where={"b": 1}) >= 0.95
    # A second run finds nothing to do.
    again = await svc.maintenance.index_scopes()
    assert again.built == [] and again.dropped == 0


async def test_an_index_a_build_left_invalid_is_built_again(svc: MemoryService) -> None:
    await fill(svc, FILLED, BIG, seed=1)
    await svc.maintenance.index_scopes()
    name = q.scope_index_name(FILLED)
    schema = svc.settings.db_schema
    async with svc.pool.acquire() as conn:
        # What an interrupted CREATE INDEX CONCURRENTLY leaves: an invalid index.
        await conn.execute(
            f"UPDATE pg_index SET indisvalid = false WHERE indexrelid = '{schema}.{name}'::regclass"
        )
    assert await present(svc) == {name: False}
    # Searches meanwhile are right: the planner never reads an invalid index.
    queries = vectors(4, 5)
    assert await same_as_exact(svc, FILLED, queries) == 1.0
    report = await svc.maintenance.index_scopes()
    assert report.rebuilt == 1 and report.built == [FILLED]
    assert await present(svc) == {name: True}
    assert await catalog(svc) == {name: "ready"}
    # gc does the same (here: nothing left to do).
    gc = await svc.maintenance.gc()
    assert gc.scope_indexes_built == 0 and gc.scope_indexes_dropped == 0


async def test_delete_scope_drops_the_index_of_the_emptied_scope(svc: MemoryService) -> None:
    other = Scope("acme", "other")
    await fill(svc, FILLED, BIG, seed=1)
    await fill(svc, other, BIG, seed=5)
    await svc.maintenance.index_scopes()
    assert len(await present(svc)) == 2
    assert await svc.memories.delete_scope(FILLED, include="exact") == BIG
    assert await present(svc) == {q.scope_index_name(other): True}
    assert await catalog(svc) == {q.scope_index_name(other): "ready"}
    assert await svc.memories.search(FILLED, vectors(3, 1)[0], k=10) == []
    # Deleting the scope above it (descendants) drops the rest.
    await svc.memories.delete_scope(Scope("acme"))
    assert await present(svc) == {} and await catalog(svc) == {}


async def test_gc_drops_the_index_of_a_scope_emptied_in_a_callers_transaction(
    svc: MemoryService,
) -> None:
    await fill(svc, FILLED, BIG, seed=1)
    await svc.maintenance.index_scopes()
    async with svc.pool.acquire() as conn, conn.transaction():
        await svc.memories.delete_scope(FILLED, conn=conn)
    assert len(await present(svc)) == 1  # left to gc: the caller's transaction held the rows
    report = await svc.maintenance.gc()
    assert report.scope_indexes_dropped == 1
    assert await present(svc) == {} and await catalog(svc) == {}


@pytest.mark.parametrize("tenant", ["acme", "o'brien\\x"])
async def test_erasure_drops_scope_indexes_and_its_check_finds_none_left(
    svc: MemoryService, tenant: str
) -> None:
    erased = Scope(tenant, "p", None, "s-1")  # a skipped level, and ids needing quotes
    kept = Scope("beta", "p")
    await fill(svc, erased, BIG, seed=1)
    await fill(svc, kept, BIG, seed=2)
    await svc.maintenance.index_scopes()
    names = await present(svc)
    assert set(names) == {q.scope_index_name(erased), q.scope_index_name(kept)}
    # One the catalog lacks (built before it, or its row lost) is found by its predicate.
    async with svc.pool.acquire() as conn:
        await conn.execute(
            f"DELETE FROM {svc.settings.db_schema}.{q.CATALOG} WHERE tenant_id = $1", tenant
        )
    receipt = await svc.erase(Scope(tenant))
    assert receipt.removed["scope_indexes"] == 1
    assert receipt.verified and "scope_indexes" not in receipt.remaining
    assert await present(svc) == {q.scope_index_name(kept): True}
    assert await catalog(svc) == {q.scope_index_name(kept): "ready"}


async def test_the_erasure_check_reads_index_definitions(svc: MemoryService) -> None:
    await fill(svc, FILLED, BIG, seed=1)
    await svc.maintenance.index_scopes()
    # An index naming the scope that no catalog lists and no erasure dropped
    # (built by hand with memsvc's definition after the erasure began).
    receipt = await svc.erase(FILLED, include="exact")
    assert receipt.verified
    async with svc.pool.acquire() as conn:
        await conn.execute(
            f"CREATE INDEX {q.scope_index_name(FILLED)} ON {svc.settings.db_schema}.memories "
            f"USING hnsw (embedding vector_cosine_ops) WHERE {q.predicate(FILLED)}"
        )
    assert await svc.memories.scope_indexes.within(FILLED, "exact") == [
        q.scope_index_name(FILLED)
    ]
    again = await svc.erase(FILLED, include="exact")
    assert again.removed["scope_indexes"] == 1 and again.verified
    assert await present(svc) == {}


async def test_the_cap_leaves_further_scopes_unindexed_and_searched_right(
    svc: MemoryService,
) -> None:
    small, big = Scope("acme", "p0"), Scope("acme", "p1")
    await fill(svc, small, BIG, seed=10)
    await fill(svc, big, BIG + 100, seed=11)
    await analyze(svc)
    capped = svc.settings.model_copy(update={"scope_indexes_max": 1})
    async with MemoryService.open(capped) as one:
        report = await one.maintenance.index_scopes()
        assert report.built == [big]  # the biggest first
        assert set(await present(one)) == {q.scope_index_name(big)}
        unindexed = await one.memories.explain_search(small, vectors(3, 1)[0], k=10)
        assert q.SCOPE_INDEX_PREFIX not in unindexed
        queries = vectors(4, 10)
        assert await same_as_exact(one, small, queries, where={"b": 2}) >= 0.95
        # The cap reached: a big scope's index made by hand (memsvc's
        # definition) counts against it, and the scope whose index went gets none.
        schema = one.settings.db_schema
        async with one.pool.acquire() as conn:
            await conn.execute(f"DROP INDEX {schema}.{q.scope_index_name(big)}")
            await conn.execute(
                f"CREATE INDEX {q.scope_index_name(small)} ON {schema}.memories "
                f"USING hnsw (embedding vector_cosine_ops) WHERE {q.predicate(small)}"
            )
        report = await one.maintenance.index_scopes()
        assert report.full == 1 and report.built == [] and report.dropped == 0
        assert await present(one) == {q.scope_index_name(small): True}
        assert await catalog(one) == {q.scope_index_name(small): "ready"}
        assert await same_as_exact(one, big, queries, where={"b": 2}) >= 0.95


async def test_searches_see_a_new_or_dropped_index_within_seconds(
    svc: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memsvc.memories import scope_indexes

    monkeypatch.setattr(scope_indexes, "DIRECTORY_SECONDS", 0.2)
    await fill(svc, FILLED, BIG, seed=1)
    await analyze(svc)
    query = vectors(3, 1)[0]
    assert q.SCOPE_INDEX_PREFIX not in await svc.memories.explain_search(FILLED, query)
    # Another process builds it: this one's searches use it once it re-reads.
    settings = svc.settings
    async with MemoryService.open(settings) as builder:
        await builder.maintenance.index_scopes()
        await asyncio.sleep(0.3)
        await until_indexed(svc, FILLED)
        assert q.scope_index_name(FILLED) in await svc.memories.explain_search(FILLED, query)
        await builder.memories.delete_scope(FILLED)
    # Dropped elsewhere: searches are right before and after re-reading.
    assert await svc.memories.search(FILLED, query) == []
    await asyncio.sleep(0.3)
    await until_indexed(svc, FILLED, indexed=False)
    assert await svc.memories.search(FILLED, query) == []


async def test_row_level_security_still_isolates_searches_of_indexed_scopes(
    memsvc_postgres: TestPostgres,
) -> None:
    from memsvc.db import migrate

    suffix = uuid.uuid4().hex[:8]
    name, role = f"memsvc_rls_si_{suffix}", f"memsvc_rt_si_{suffix}"
    dsn = await memsvc_postgres.create_database(name)
    owner = settings_for_tests(dsn, row_level_security=True)
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
    runtime = settings_for_tests(
        dsn.replace("postgres@", f"{role}@", 1),
        row_level_security=True,
        scope_index_from=FROM,
    )
    alpha, beta = Scope("alpha", "p"), Scope("beta", "p")
    async with MemoryService.open(runtime) as svc:
        await fill(svc, alpha, BIG, seed=1)
        await fill(svc, beta, 100, seed=2)
        skipped = await svc.maintenance.index_scopes()
        assert skipped.skipped == "row_level_security" and skipped.built == []
        # The owner (who sees every tenant's rows) builds them, as gc run by the owner would.
        builder_settings = settings_for_tests(dsn, scope_index_from=FROM)
        async with MemoryService.open(builder_settings) as builder:
            await analyze(builder)
            built = await builder.maintenance.index_scopes()
        assert built.built == [alpha]
        query = vectors(3, 1)[0]
        await until_indexed(svc, alpha)
        plan = await svc.memories.explain_search(alpha, query, k=10)
        assert f"Index Scan using {q.scope_index_name(alpha)}" in plan
        hits = await svc.memories.search(alpha, query, k=10)
        assert len(hits) == 10 and all(h.memory.scope == alpha for h in hits)
        # Searching alpha's scope as beta (its rows hidden) finds nothing of alpha's.
        async with svc.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT set_config('memsvc.tenant', 'beta', true)")
            seen = await conn.fetchval(
                "SELECT count(*) FROM memsvc.memories WHERE tenant_id = 'alpha'"
            )
        assert seen == 0
        # Each tenant's searches learn of their own scopes' indexes only.
        await svc.memories.scope_indexes.read_directory("beta")  # beta's rows only
        assert not svc.memories.scope_indexes.indexed(beta)
        beta_hits = await svc.memories.search(beta, query, k=10)
        assert len(beta_hits) == 10 and all(h.memory.scope == beta for h in beta_hits)
    await memsvc_postgres.drop_database(name)


async def test_gc_by_a_role_that_cannot_build_goes_on_without_scope_indexes(
    memsvc_database_url: str,
) -> None:
    role = f"memsvc_si_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(memsvc_database_url)
    try:
        await admin.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER")
        await admin.execute(f"GRANT USAGE ON SCHEMA memsvc TO {role}")
        await admin.execute(
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA memsvc TO {role}"
        )
        await admin.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA memsvc TO {role}")
    finally:
        await admin.close()
    settings = settings_for_tests(
        memsvc_database_url.replace("postgres@", f"{role}@", 1), scope_index_from=100
    )
    async with MemoryService.open(settings) as svc:
        await fill(svc, FILLED, 150, seed=1)
        report = await svc.maintenance.gc()  # CREATE INDEX needs the table's owner
        assert report.scope_indexes_built == 0
        indexes = await svc.maintenance.index_scopes()
        assert indexes.skipped == "build failed: 42501" and indexes.built == []
        assert await present(svc) == {} and await catalog(svc) == {}
        assert len(await svc.memories.search(FILLED, vectors(3, 1)[0], k=10)) == 10


def test_a_predicate_is_read_back_into_the_scope_it_names() -> None:
    for scope in (
        Scope("acme"),
        Scope("acme", None, "agent"),
        Scope("o'brien", "p\\q", None, "s"),
        Scope("t", "p", "a", "s"),
    ):
        assert q.read_predicate(q.deparsed_predicate(scope)) == (scope, "exact")
    for scope in (Scope("acme"), Scope("o'brien", "p\\q"), Scope("t", None, "a")):
        subtree = q.deparsed_predicate(scope, "descendants")
        assert q.read_predicate(subtree) == (scope, "descendants")
    assert q.deparsed_predicate(Scope("acme"), "descendants") == "(tenant_id = 'acme'::text)"
    assert q.read_predicate("((tenant_id = 'acme'::text) AND (agent_id = 'x'::text))") is None
    assert q.read_predicate("(tenant_id = 'acme'::text) AND true") is None


async def test_a_walk_of_a_scopes_own_index_sets_its_ef_search_for_its_statement_only(
    memsvc_database_url: str,
) -> None:
    from memsvc.db.codecs import vector_bytes
    from memsvc.db.hnsw_walks import own_graph_ef

    # One pooled connection: the statement it caches is the one searches ran.
    settings = settings_for_tests(
        memsvc_database_url, scope_index_from=100, pool_min_size=1, pool_max_size=1
    )
    scope, query = Scope("acme", "walked"), vectors(3, 1)[0]
    configured = str(settings.hnsw_ef_search)
    wanted = own_graph_ef(10, settings.hnsw_ef_search)
    assert wanted is not None and str(wanted) != configured
    async with MemoryService.open(settings) as svc:
        await fill(svc, scope, 600, seed=5)
        await analyze(svc)
        assert (await svc.maintenance.index_scopes()).built == [scope]
        await until_indexed(svc, scope)
        plan = await svc.memories.explain_search(scope, query, k=10)
        walk = f"A walk of the scope's own index keeps {wanted} candidates"
        assert plan.splitlines()[-2] == walk
        # More rows than the configured walk keeps: the connection's setting.
        assert "A walk of" not in await svc.memories.explain_search(scope, query, k=60)
        assert len(await svc.memories.search(scope, query, k=10)) == 10
        setting = f"set_config('hnsw.ef_search', '{wanted}', true)"
        async with svc.pool.acquire() as conn:
            # The setting ended with the search's statement.
            assert await conn.fetchval("SHOW hnsw.ef_search") == configured
            ran = await conn.fetchval(
                "SELECT statement FROM pg_prepared_statements "
                "WHERE strpos(statement, $1) > 0 AND statement NOT LIKE 'EXPLAIN%'",
                setting,
            )
            assert ran is not None
            # It is made before the walk starts: without iterative scans a
            # walk returns at most ef_search rows.
            tiny = ran.replace(setting, "set_config('hnsw.ef_search', '3', true)")
            async with conn.transaction():
                await conn.execute("SET LOCAL hnsw.iterative_scan = off")
                await conn.execute("SET LOCAL enable_sort = off")  # walk, do not sort
                rows = await conn.fetch(tiny, vector_bytes(query), 10, "acme", "walked")
            assert len(rows) == 3
            # A caller's transaction is left as it was: no setting of the walk's.
            async with conn.transaction():
                found = await svc.memories.search(scope, query, k=10, conn=conn)
                assert len(found) == 10
                assert await conn.fetchval("SHOW hnsw.ef_search") == configured
            plan = await svc.memories.explain_search(scope, query, k=10, conn=conn)
            assert "A walk of" not in plan


async def test_one_scan_finds_the_exact_scopes_then_the_subtrees_worth_an_index(
    svc: MemoryService,
) -> None:
    held = {
        Scope("acme", "p1", "a1"): 5,
        Scope("acme", "p1"): 1,
        Scope("acme", "p2"): 4,  # nothing below the project: its exact index serves it
        Scope("solo"): 3,  # nothing below the tenant
    }
    for seed, (scope, count) in enumerate(held.items()):
        await fill(svc, scope, count, seed=seed)
    sql = q.worth_an_index(svc.settings.db_schema)

    async def worth(least: int, most: int, share: float) -> list[tuple[str, Scope, int]]:
        async with svc.pool.acquire() as conn:
            rows = await conn.fetch(sql, least, most, share)
        return [
            (
                row["include"],
                Scope(row["tenant_id"], row["project_id"], row["agent_id"], row["session_id"]),
                row["vectors"],
            )
            for row in rows
        ]

    assert await worth(3, 10, 1.0) == [
        ("exact", Scope("acme", "p1", "a1"), 5),
        ("exact", Scope("acme", "p2"), 4),
        ("exact", Scope("solo"), 3),
        ("descendants", Scope("acme"), 10),
        ("descendants", Scope("acme", "p1"), 6),
    ]
    # At most half of the table's 13 vectors; at most two of each kind.
    assert await worth(3, 2, 0.5) == [
        ("exact", Scope("acme", "p1", "a1"), 5),
        ("exact", Scope("acme", "p2"), 4),
        ("descendants", Scope("acme", "p1"), 6),
    ]


async def test_a_big_subtree_gets_its_own_index_and_its_descendants_searches_walk_it(
    svc: MemoryService,
) -> None:
    tenant, filler = Scope("corp"), Scope("filler")
    # 5,000 vectors under the tenant, none in one scope past the threshold;
    # the filler tenant holds more than half the table: left to its graph.
    for project, seed in (("p0", 11), ("p1", 12)):
        await fill(svc, Scope("corp", project), BIG // 2, seed=seed)
    for project, seed in (("f0", 13), ("f1", 14), ("f2", 15)):
        await fill(svc, Scope("filler", project), 2_000, seed=seed)
    await analyze(svc)
    # Subtrees get at most half the cap: none with a cap of 1.
    narrow = svc.settings.model_copy(update={"scope_indexes_max": 1})
    async with MemoryService.open(narrow) as builder:
        report = await builder.maintenance.index_scopes()
    assert report.subtrees_built == [] and report.full == 1
    wider = svc.settings.model_copy(update={"scope_indexes_max": 2})
    async with MemoryService.open(wider) as builder:
        report = await builder.maintenance.index_scopes()
    name = q.scope_index_name(tenant, "descendants")
    assert report.subtrees_built == [tenant] and report.built == []
    assert await present(svc) == {name: True}
    assert await catalog(svc) == {name: "ready"}
    await svc.memories.scope_indexes.read_directory()  # built by the other service
    await until_indexed(svc, tenant, include="descendants")
    query = vectors(3, 1)[0]
    plan = await svc.memories.explain_search(tenant, query, k=10, include="descendants")
    assert f"Index Scan using {name}" in plan
    assert plan.endswith(f"Scope index of this scope: {name}")
    # Counted at its build: a small graph, walked as a scope's own.
    assert await counted(svc) == {name: BIG}
    assert plan.splitlines()[-2] == "A walk of the scope's own index keeps 40 candidates"
    # Counted past the size where a sized walk keeps its recall: the
    # configured walk; gc counts it again.
    async with svc.pool.acquire() as conn:
        await conn.execute(
            f"UPDATE {svc.settings.db_schema}.memory_scope_indexes SET vectors = $1",
            OWN_GRAPH_SIZED_UP_TO + 1,
        )
    await svc.memories.scope_indexes.read_directory()
    plan = await svc.memories.explain_search(tenant, query, k=10, include="descendants")
    assert f"Index Scan using {name}" in plan and "A walk of" not in plan
    await svc.memories.add(Scope("corp", "p1"), "one more", embedding=vectors(9, 1)[0])
    assert (await svc.maintenance.index_scopes()).subtrees_built == []
    assert await counted(svc) == {name: BIG + 1}
    plan = await svc.memories.explain_search(tenant, query, k=10, include="descendants")
    assert plan.splitlines()[-2] == "A walk of the scope's own index keeps 40 candidates"
    # Exact searches of the tenant, and the filler's, keep their statements.
    assert q.SCOPE_INDEX_PREFIX not in await svc.memories.explain_search(tenant, query, k=10)
    other = await svc.memories.explain_search(filler, query, k=10, include="descendants")
    assert q.SCOPE_INDEX_PREFIX not in other
    queries = vectors(4, 20)
    for where in (None, {"b": 1}):
        recalls = []
        for query in queries:
            got = await svc.memories.search(
                tenant, query, k=10, include="descendants", where=where
            )
            truth = await svc.memories.search(
                tenant, query, k=10, include="descendants", where=where, plan="exact"
            )
            assert len(got) == 10 == len(truth)  # no short page, filtered or not
            assert all(hit.memory.scope.tenant == "corp" for hit in got)
            recalls.append(len({h.memory.id for h in got} & {h.memory.id for h in truth}) / 10)
        assert np.mean(recalls) >= 0.95
    # Half the subtree deleted: still worth its index (half the threshold).
    await svc.memories.delete_scope(Scope("corp", "p0"))
    assert await present(svc) == {name: True}
    # Erasure of the tenant drops it; the receipt's check finds none left.
    receipt = await svc.erase(tenant)
    assert receipt.removed["scope_indexes"] == 1
    assert receipt.verified and "scope_indexes" not in receipt.remaining
    assert await present(svc) == {} and await catalog(svc) == {}


async def test_a_build_outlasting_the_command_timeout_is_not_cut_short(
    svc: MemoryService,
) -> None:
    await fill(svc, FILLED, BIG, seed=1)
    impatient = svc.settings.model_copy(update={"command_timeout_s": 1.0})
    async with MemoryService.open(impatient) as builder:
        # CREATE INDEX CONCURRENTLY waits for this open write: the build
        # lasts past the builder's client-side command timeout.
        async with svc.pool.acquire() as conn, conn.transaction():
            await svc.memories.add(SMALL, "an open write", conn=conn)
            build = asyncio.create_task(builder.maintenance.index_scopes())
            await asyncio.sleep(2.5)
            assert not build.done()
        report = await build
    assert report.built == [FILLED]
    assert await present(svc) == {q.scope_index_name(FILLED): True}


async def index_oids(svc: MemoryService) -> dict[str, int]:
    async with svc.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT c.relname, c.oid FROM pg_class AS c WHERE c.relname = any($1::text[])",
            list(await present(svc)),
        )
    return {row["relname"]: row["oid"] for row in rows}


async def test_a_bulk_import_drops_the_scope_indexes_for_the_load_and_builds_them_after(
    svc: MemoryService, tmp_path: Path
) -> None:
    loaded = Scope("acme", "loaded")
    await fill(svc, FILLED, BIG, seed=1)
    await fill(svc, loaded, BIG, seed=5)
    export = tmp_path / "loaded.jsonl"
    await svc.maintenance.export(export, scope=loaded)
    await svc.memories.delete_scope(loaded)
    report = await svc.maintenance.index_scopes()
    assert report.built == [FILLED]
    before = await index_oids(svc)
    # Every loaded row would go into the indexed scopes' graphs one by one:
    # the load drops them with the table's, and builds them again after it.
    loading = await svc.maintenance.import_file(export, index_mode="rebuild")
    assert loading.memories.inserted == BIG and loading.index_rebuilt
    assert loading.scope_indexes_dropped == 1 and loading.scope_indexes_built == 2
    names = {q.scope_index_name(FILLED), q.scope_index_name(loaded)}
    assert await present(svc) == dict.fromkeys(names, True)
    assert await catalog(svc) == dict.fromkeys(names, "ready")
    # A new index of the filled scope: the one before was dropped.
    assert (await index_oids(svc))[q.scope_index_name(FILLED)] != before[
        q.scope_index_name(FILLED)
    ]
    await analyze(svc)
    await until_indexed(svc, loaded)
    plan = await svc.memories.explain_search(loaded, vectors(3, 1)[0], k=10)
    assert f"Index Scan using {q.scope_index_name(loaded)}" in plan
    assert await same_as_exact(svc, loaded, vectors(4, 10)) >= 0.95


async def test_gc_builds_no_scope_index_while_a_bulk_load_has_them_dropped(
    svc: MemoryService, memsvc_database_url: str
) -> None:
    await fill(svc, FILLED, BIG, seed=1)
    loader = await asyncpg.connect(memsvc_database_url)
    try:
        assert await loader.fetchval("SELECT pg_try_advisory_lock($1)", BULK_LOCK_KEY)
        report = await svc.maintenance.index_scopes()
        assert report.skipped == "bulk load" and report.built == []
        assert await present(svc) == {}
    finally:
        await loader.close()  # the load ends: its session lock goes
    report = await svc.maintenance.index_scopes()
    assert report.built == [FILLED] and report.skipped is None
