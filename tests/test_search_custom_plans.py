"""Filtered searches are planned for their values, every time.

A statement from asyncpg's cache gets a generic plan from its sixth run if
PostgreSQL estimates it no dearer than the custom ones; one estimated
without the filter's values can be several times slower (a metadata filter
matching a quarter of a scope, guessed at 1%). memsvc prepares a filtered
search for its run only, so every run gets a plan for its values: the
server's own count of generic plans (``pg_prepared_statements``) shows none.
The control runs a filtered statement of the same shape through the cache on
the same connection and data: PostgreSQL does switch it to a generic plan.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import asyncpg
import numpy as np
import pytest

from memsvc import MemoryService, Scope
from memsvc.testing.postgres import settings_for_tests

SCOPE = Scope("acme", "plans")
RUNS = 8


@pytest.fixture
async def svc(memsvc_database_url: str) -> AsyncIterator[MemoryService]:
    # One pooled connection: every search runs on it, and so does the check.
    settings = settings_for_tests(memsvc_database_url, pool_min_size=1, pool_max_size=1)
    async with MemoryService.open(settings) as service:
        rng = np.random.default_rng(3)
        vectors = rng.normal(size=(400, settings.embedding_dim)).astype(np.float32)
        await service.memories.add_many(
            SCOPE,
            [
                {"content": f"note {i}", "embedding": v, "metadata": {"b": i % 4}}
                for i, v in enumerate(vectors)
            ],
        )
        async with service.pool.acquire() as conn:
            await conn.execute(f"ANALYZE {settings.db_schema}.memories")
        yield service


async def generic_plans(conn: asyncpg.Connection, fragment: str) -> list[tuple[int, int]]:
    """(custom, generic) plan counts of this session's prepared statements holding ``fragment``."""
    rows = await conn.fetch(
        "SELECT custom_plans, generic_plans FROM pg_prepared_statements "
        "WHERE strpos(statement, $1) > 0",
        fragment,
    )
    return [(row["custom_plans"], row["generic_plans"]) for row in rows]


@pytest.mark.parametrize(
    "filters",
    [
        {"where": {"b": 1}},
        {"min_importance": 0.2},
        {"created_after": datetime(2000, 1, 1, tzinfo=UTC)},
        {"valid_at": datetime(2999, 1, 1, tzinfo=UTC)},
    ],
    ids=["where", "min_importance", "created_after", "valid_at"],
)
async def test_a_filtered_search_never_runs_a_generic_plan(
    svc: MemoryService, filters: dict[str, object]
) -> None:
    rng = np.random.default_rng(4)
    for _ in range(RUNS):
        query = rng.normal(size=svc.settings.embedding_dim).astype(np.float32)
        assert len(await svc.memories.search(SCOPE, query, k=10, **filters)) == 10
    async with svc.pool.acquire() as conn:
        # Statements prepared for one run are closed after it; one cached
        # by the connection would be listed, with its generic plans.
        counts = await generic_plans(conn, "ORDER BY embedding")
    assert all(generic == 0 for _, generic in counts), counts


async def test_control_a_cached_filtered_statement_goes_generic(svc: MemoryService) -> None:
    schema = svc.settings.db_schema
    sql = (
        f"SELECT id FROM {schema}.memories "
        "WHERE tenant_id = $1 AND project_id = $2 AND metadata @> $3::jsonb "
        "ORDER BY embedding <=> $4 LIMIT 10"
    )
    rng = np.random.default_rng(5)
    async with svc.pool.acquire() as conn:
        for _ in range(RUNS):
            query = rng.normal(size=svc.settings.embedding_dim).astype(np.float32)
            rows = await conn.fetch(sql, SCOPE.tenant, SCOPE.project, '{"b": 1}', query)
            assert len(rows) == 10
        counts = await generic_plans(conn, "metadata @> $3::jsonb")
    assert counts and counts[0][1] > 0, counts
