"""Tenant partitioning (Settings.partitions): schema, pruning, planner choice, refusal, ops.

The whole memories / search / assemblies / changes / erasure suites also run
against a partitioned schema with ``MEMSVC_PARTITIONS=4 pytest ...``; this
module keeps a representative part of that in every run.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import numpy as np
import pytest
from alembic import command

from memsvc import MemoryService, SchemaError, Scope, Settings
from memsvc.db import migrate
from memsvc.db.tables import build_metadata
from memsvc.embedding import HashingEmbedder
from memsvc.ops.doctor import Doctor
from memsvc.testing.postgres import (
    MigratedTemplate,
    TestPostgres,
    run_in_own_loop,
    settings_for_tests,
)
from memsvc.transfer.bulk import MEMORY_VECTOR_INDEX, VectorIndexRebuild

PARTITIONS = 4


@pytest.fixture(scope="module")
def partitioned_template(memsvc_postgres: TestPostgres) -> Iterator[MigratedTemplate]:
    template = MigratedTemplate(memsvc_postgres, partitions=PARTITIONS)
    run_in_own_loop(template.build())
    yield template
    run_in_own_loop(template.drop())


@pytest.fixture
async def parted(partitioned_template: MigratedTemplate) -> AsyncIterator[Settings]:
    """Settings of a fresh database whose memories are in 4 hash partitions."""
    async with partitioned_template.fresh_database() as dsn:
        yield partitioned_template.settings(dsn)


@pytest.fixture
async def parted_service(parted: Settings) -> AsyncIterator[MemoryService]:
    async with MemoryService.open(parted) as service:
        yield service


@pytest.fixture
async def empty_database(memsvc_postgres: TestPostgres) -> AsyncIterator[str]:
    name = f"memsvc_part_{uuid.uuid4().hex[:10]}"
    dsn = await memsvc_postgres.create_database(name)
    yield dsn
    await memsvc_postgres.drop_database(name)


def unit_vectors(count: int, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(count, 384)).astype(np.float32)
    return np.asarray(vectors / np.linalg.norm(vectors, axis=1, keepdims=True))


async def partition_of(conn: asyncpg.Connection, tenant: str) -> str:
    """The partition holding a tenant's memories."""
    name: str = await conn.fetchval(
        "SELECT tableoid::regclass::text FROM memsvc.memories WHERE tenant_id = $1 LIMIT 1", tenant
    )
    return name.removeprefix("memsvc.")


# ------------------------------------------------------------------ schema


async def test_partitioned_schema_round_trips_and_matches_the_metadata(
    empty_database: str,
) -> None:
    settings = settings_for_tests(empty_database, partitions=PARTITIONS)

    def run() -> None:
        migrate.upgrade(settings, empty_database)
        migrate.downgrade(settings, empty_database, "base")
        migrate.upgrade(settings, empty_database)
        command.check(migrate.alembic_config(settings, empty_database))

    await asyncio.to_thread(run)
    conn = await asyncpg.connect(empty_database)
    try:
        partitions = await conn.fetch(
            "SELECT c.relname, c.relrowsecurity, obj_description(c.oid) AS comment, "
            "pg_get_expr(c.relpartbound, c.oid) AS bound FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'memsvc.memories'::regclass ORDER BY c.relname"
        )
        hnsw = await conn.fetch(
            "SELECT c.relname, x.indisvalid FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_index x ON x.indexrelid = c.oid "
            "WHERE i.inhparent = 'memsvc.ix_memories_embedding_hnsw'::regclass ORDER BY 1"
        )
        policies = await conn.fetchval(
            "SELECT count(*) FROM pg_policies WHERE schemaname = 'memsvc' "
            "AND tablename LIKE 'memories_p%' AND policyname = 'tenant_isolation'"
        )
        recorded = await conn.fetchval(
            "SELECT value FROM memsvc.schema_info WHERE key = 'partitions'"
        )
        events_partitioned = await conn.fetchval(
            "SELECT relkind = 'p' FROM pg_class WHERE oid = 'memsvc.memory_events'::regclass"
        )
        tables = await conn.fetchval("SELECT count(*) FROM pg_tables WHERE schemaname = 'memsvc'")
    finally:
        await conn.close()
    assert [p["relname"] for p in partitions] == [f"memories_p{i}" for i in range(PARTITIONS)]
    assert [p["bound"] for p in partitions] == [
        f"FOR VALUES WITH (modulus {PARTITIONS}, remainder {i})" for i in range(PARTITIONS)
    ]
    assert all(p["comment"] for p in partitions)
    assert not any(p["relrowsecurity"] for p in partitions)  # RLS off here, like the parent
    # Every partition has its own HNSW index, attached to the parent's, named after it.
    assert [(h["relname"], h["indisvalid"]) for h in hnsw] == [
        (f"{MEMORY_VECTOR_INDEX}_p{i}", True) for i in range(PARTITIONS)
    ]
    assert policies == PARTITIONS
    assert recorded == str(PARTITIONS)
    assert events_partitioned is False
    # Every table of the schema, alembic's version table, and the partitions.
    assert tables == len(build_metadata(Settings()).tables) + 1 + PARTITIONS


async def test_row_level_security_binds_the_partitions_too(empty_database: str) -> None:
    settings = settings_for_tests(
        empty_database, partitions=PARTITIONS, row_level_security=True
    )
    await migrate.upgrade_async(settings, empty_database)
    conn = await asyncpg.connect(empty_database)
    try:
        loose = await conn.fetchval(
            "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'memsvc.memories'::regclass "
            "AND NOT (c.relrowsecurity AND c.relforcerowsecurity)"
        )
    finally:
        await conn.close()
    assert loose == 0
    async with MemoryService.open(settings) as service:
        stored = await service.memories.add(Scope("acme"), "secret plans")
        assert (await service.memories.get(stored.id, tenant="acme")).content == "secret plans"


# ------------------------------------------------------------------ refusal


async def test_a_changed_partitions_setting_is_refused(
    parted: Settings, memsvc_template: MigratedTemplate
) -> None:
    for other in (0, 1, 8):
        with pytest.raises(SchemaError) as caught:
            await MemoryService.open(parted.model_copy(update={"partitions": other}))
        message = str(caught.value)
        assert "MEMSVC_PARTITIONS=4" in message and f"settings say {other}" in message
        other_settings = parted.model_copy(update={"partitions": other})
        assert other_settings.database_url is not None
        report = await Doctor(other_settings, other_settings.database_url).run()
        problem = {check.name: check for check in report.checks}["partitions"]
        assert problem.status == "problem" and "MEMSVC_PARTITIONS" in problem.detail
    async with memsvc_template.fresh_database() as dsn:
        plain = memsvc_template.settings(dsn)
        if plain.partition_count:
            pytest.skip("the suite's default template is partitioned (MEMSVC_PARTITIONS)")
        with pytest.raises(SchemaError, match="created with not partitioned, settings say 4"):
            await MemoryService.open(plain.model_copy(update={"partitions": PARTITIONS}))
        # 1 means not partitioned: it opens.
        async with MemoryService.open(plain.model_copy(update={"partitions": 1})):
            pass
    assert parted.database_url is not None
    report = await Doctor(parted, parted.database_url).run()
    assert {c.name: c for c in report.checks}["partitions"].detail == (
        "memories in 4 hash partitions by tenant"
    )


# ------------------------------------------------------------------ pruning


def scanned_partitions(plan: Any) -> set[str]:
    """Memories partitions a plan (EXPLAIN ANALYZE, JSON) really read."""
    found: set[str] = set()

    def walk(node: dict[str, Any]) -> None:
        relation = node.get("Relation Name", "")
        if relation.startswith("memories_p") and node.get("Actual Loops", 0) > 0:
            found.add(relation)
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    return found


@pytest.fixture(scope="module")
async def loaded(
    partitioned_template: MigratedTemplate,
) -> AsyncIterator[tuple[MemoryService, np.ndarray]]:
    """Tenant 'big': 8,000 rows in one project (where HNSW pays) and 40 in another;
    12 small tenants spread over the partitions. Loaded once for the module."""
    async with partitioned_template.fresh_database() as dsn:
        parted = partitioned_template.settings(dsn)
        async for loaded_service in _load(parted):
            yield loaded_service


async def _load(parted: Settings) -> AsyncIterator[tuple[MemoryService, np.ndarray]]:
    assert parted.database_url is not None
    vectors = unit_vectors(8_040)
    async with MemoryService.open(parted) as service:
        async with VectorIndexRebuild(parted.database_url, parted) as rebuild:
            await service.memories.add_many(
                Scope("big", "large"),
                [{"content": f"l{i}", "embedding": v} for i, v in enumerate(vectors[:8_000])],
            )
        assert rebuild.active and rebuild.build_seconds > 0
        await service.memories.add_many(
            Scope("big", "small"),
            [{"content": f"s{i}", "embedding": v} for i, v in enumerate(vectors[8_000:])],
        )
        for tenant in range(12):
            await service.memories.add_many(
                Scope(f"other{tenant}"),
                [{"content": f"o{i}", "embedding": v} for i, v in enumerate(vectors[:20])],
            )
        async with service.pool.acquire() as conn:
            await conn.execute("ANALYZE memsvc.memories")
        yield service, vectors


async def test_the_bulk_rebuild_builds_each_partitions_index_and_attaches_it(
    loaded: tuple[MemoryService, np.ndarray],
) -> None:
    service, _ = loaded
    async with service.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT c.relname, x.indisvalid FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_index x ON x.indexrelid = c.oid "
            "WHERE i.inhparent = 'memsvc.ix_memories_embedding_hnsw'::regclass ORDER BY 1"
        )
        parent_valid = await conn.fetchval(
            "SELECT indisvalid FROM pg_index "
            "WHERE indexrelid = 'memsvc.ix_memories_embedding_hnsw'::regclass"
        )
    assert parent_valid is True
    assert [(r["relname"], r["indisvalid"]) for r in rows] == [
        (f"{MEMORY_VECTOR_INDEX}_p{i}", True) for i in range(PARTITIONS)
    ]


async def test_a_tenants_reads_touch_one_partition_in_custom_and_generic_plans(
    loaded: tuple[MemoryService, np.ndarray],
) -> None:
    """The statements memsvc really sends (captured), replayed under EXPLAIN ANALYZE."""
    service, vectors = loaded
    sent: list[tuple[str, tuple[Any, ...]]] = []
    async with service.pool.acquire() as conn:
        tenant_partition = await partition_of(conn, "big")
        conn.add_query_logger(lambda logged: sent.append((logged.query, logged.args)))
        stored = await service.memories.add(Scope("big", "small"), "one more", conn=conn)
        await service.memories.get(stored.id, tenant="big", conn=conn)
        await service.memories.list(Scope("big", "large"), limit=5, conn=conn)
        await service.memories.count(Scope("big"), include="descendants", conn=conn)
        for plan in ("auto", "exact"):  # HNSW with iterative scans, and the exact path
            await service.memories.search(Scope("big", "large"), vectors[5], plan=plan, conn=conn)
        await service.memories.search(Scope("big", "small"), vectors[8_005], conn=conn)
        await service.memories.search(
            Scope("big"), vectors[7], include="descendants", conn=conn
        )
        await service.memories.search(
            Scope("big", "large"), "l12", mode="hybrid", query_embedding=vectors[12], conn=conn
        )
        conn.add_query_logger(lambda _logged: None)
    reads = [
        (sql, args)
        for sql, args in sent
        if "memsvc.memories" in sql and sql.lstrip().upper().startswith(("SELECT", "WITH"))
        and "INSERT" not in sql.upper()
    ]
    assert len(reads) >= 8, [sql[:60] for sql, _ in sent]
    async with service.pool.acquire() as conn:
        for mode in ("force_custom_plan", "force_generic_plan"):
            await conn.execute(f"SET plan_cache_mode = {mode}")
            for sql, args in reads:
                plan = json.loads(
                    await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", *args)
                )
                assert scanned_partitions(plan) == {tenant_partition}, (mode, sql)
        await conn.execute("RESET plan_cache_mode")


async def test_the_planner_still_chooses_hnsw_or_exact_per_query(
    loaded: tuple[MemoryService, np.ndarray],
) -> None:
    service, vectors = loaded
    async with service.pool.acquire() as conn:
        partition = await partition_of(conn, "big")
    index = f"Index Scan using {MEMORY_VECTOR_INDEX}_{partition.removeprefix('memories_')}"
    large = await service.memories.explain_search(Scope("big", "large"), vectors[5], k=10)
    small = await service.memories.explain_search(Scope("big", "small"), vectors[8_005], k=10)
    assert index in large, large
    assert "Index Scan using" in small and MEMORY_VECTOR_INDEX not in small, small
    hits = await service.memories.search(Scope("big", "large"), vectors[5], k=10)
    assert hits[0].memory.content == "l5"
    exact = await service.memories.search(Scope("big", "large"), vectors[5], k=10, plan="exact")
    assert exact[0].memory.content == "l5"
    (small_hit, *_) = await service.memories.search(Scope("big", "small"), vectors[8_005], k=10)
    assert small_hit.memory.content == "s5"


# ------------------------------------------------------------------ behaviour


@pytest.mark.parametrize("area", ["memories", "assemblies", "changes", "erasure", "doctor"])
async def test_memsvc_works_the_same_on_partitioned_memories(
    parted_service: MemoryService, area: str
) -> None:
    service = parted_service
    scope = Scope("acme", "p", "a", "s")
    first = await service.memories.add(scope, "first memory", metadata={"k": 1})
    if area == "memories":
        assert (await service.memories.add(scope, "first memory")).id == first.id  # dedupe
        put = await service.memories.put(scope, "pref", "tea")
        replaced = await service.memories.put(scope, "pref", "coffee")
        assert replaced.id == put.id and replaced.version == 2
        updated = await service.memories.update(first.id, content="changed", tenant="acme")
        assert updated.version == 2
        assert [m.id for m in await service.memories.list(scope)] == sorted([first.id, put.id])
        assert len(await service.memories.history(first.id, tenant="acme")) == 2
        await service.memories.delete(first.id, tenant="acme")
        assert await service.memories.count(scope) == 1
    elif area == "assemblies":
        group = await service.assemblies.create(scope, "g", memory_ids=[first.id])
        assert (await service.assemblies.get(group.id, tenant="acme")).member_count == 1
        # The foreign key to the partitioned table cascades a member's delete.
        await service.memories.delete(first.id, tenant="acme")
        assert (await service.assemblies.get(group.id, tenant="acme")).member_count == 0
    elif area == "changes":
        await service.memories.update(first.id, content="again", tenant="acme")
        await service.memories.delete(first.id, tenant="acme")
        feed = service.changes(Scope("acme"))
        kinds = [(await asyncio.wait_for(anext(feed), 10)).kind for _ in range(3)]
        assert kinds == ["created", "updated", "deleted"]
    elif area == "erasure":
        await service.memories.add(Scope("acme", "p", "a", "other"), "other session")
        receipt = await service.erase(scope)
        assert receipt.verified and receipt.removed["memories"] == 1
        assert await service.memories.count(Scope("acme"), include="descendants") == 1
    else:
        report = await service.maintenance.doctor()
        assert report.ok, report


async def test_reembed_builds_the_new_index_per_partition_and_keeps_the_names(
    parted: Settings,
) -> None:
    """The online embedding migration's concurrent build works on a partitioned table."""
    settings = parted.model_copy(update={"embedding_state_refresh_s": 0.2})
    async with MemoryService.open(
        settings, embedder=HashingEmbedder(384), next_embedder=HashingEmbedder(96)
    ) as service:
        for tenant in ("acme", "globex", "initech", "umbrella", "hooli"):
            await service.memories.add_many(Scope(tenant), [f"{tenant} note {i}" for i in range(8)])
        report = await service.maintenance.reembed("hashing", dim=96, batch_size=10)
        assert report.switched_here
        hits = await service.memories.search(Scope("acme"), "acme note 3", k=1, mode="vector")
        assert hits[0].memory.content == "acme note 3"
        async with service.pool.acquire() as conn:
            rows = await conn.fetch(
                "SELECT c.relname, x.indisvalid FROM pg_inherits i "
                "JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_index x ON x.indexrelid = c.oid "
                "WHERE i.inhparent = 'memsvc.ix_memories_embedding_hnsw'::regclass ORDER BY 1"
            )
            column = await conn.fetchval(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = 'memsvc.memories_p0'::regclass AND attname = 'embedding'"
            )
    assert [(r["relname"], r["indisvalid"]) for r in rows] == [
        (f"{MEMORY_VECTOR_INDEX}_p{i}", True) for i in range(PARTITIONS)
    ]
    assert column == "vector(96)"
