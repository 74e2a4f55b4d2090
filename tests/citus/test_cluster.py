"""The fixtures themselves: a 3-node cluster, memsvc's tables distributed by tenant."""

from __future__ import annotations

import asyncpg

from memsvc import MemoryService, Scope, Settings
from memsvc.service import TENANT_TABLES
from memsvc.testing.citus import CitusCluster


async def test_cluster_has_two_active_workers(citus_cluster: CitusCluster) -> None:
    conn = await asyncpg.connect(citus_cluster.dsn)
    try:
        workers = await conn.fetchval("SELECT count(*) FROM citus_get_active_worker_nodes()")
    finally:
        await conn.close()
    assert workers == 2


async def test_every_tenant_table_is_distributed_by_tenant_and_colocated(
    citus_settings: Settings, citus_cluster: CitusCluster
) -> None:
    conn = await asyncpg.connect(citus_cluster.dsn)
    try:
        rows = await conn.fetch(
            "SELECT table_name::text AS name, citus_table_type, distribution_column, "
            "colocation_id FROM citus_tables WHERE table_name::text LIKE $1",
            f"{citus_settings.db_schema}.%",
        )
    finally:
        await conn.close()
    by_name = {r["name"].split(".", 1)[1]: r for r in rows}
    distributed = {n for n, r in by_name.items() if r["citus_table_type"] == "distributed"}
    assert set(TENANT_TABLES) <= distributed
    assert {by_name[n]["distribution_column"] for n in distributed} == {"tenant_id"}
    assert len({by_name[n]["colocation_id"] for n in distributed}) == 1
    assert by_name["schema_info"]["citus_table_type"] == "reference"


async def test_reset_leaves_an_empty_schema_that_opens(citus_service: MemoryService) -> None:
    scope = Scope(tenant="acme", project="p")
    assert await citus_service.memories.count(scope, include="descendants") == 0
    await citus_service.memories.add(scope, "left behind on purpose")
    assert await citus_service.memories.count(scope) == 1


async def test_the_next_test_sees_none_of_it(citus_service: MemoryService) -> None:
    scope = Scope(tenant="acme", project="p")
    assert await citus_service.memories.count(scope, include="descendants") == 0
