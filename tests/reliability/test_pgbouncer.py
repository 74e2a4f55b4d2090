"""The concurrency specifications again, through a real pgbouncer in transaction
pooling mode (``Settings.pgbouncer=True``): no prepared statements, no session
state, a different server connection for each transaction."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

import tests.test_memories_asof as asof
import tests.test_memories_concurrency as concurrency
from memsvc import HashingEmbedder, MemoryService, Scope
from memsvc.testing.postgres import MigratedTemplate, TestPostgres, settings_for_tests
from tests.reliability.conftest import bounded
from tests.reliability.servers import database_behind_pgbouncer
from tests.reliability.test_list_append_oracle import check_memory_lists

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def bouncer_service(
    memsvc_postgres: TestPostgres, memsvc_template: MigratedTemplate
) -> AsyncIterator[MemoryService]:
    """A MemoryService on a fresh database reached only through pgbouncer."""
    async with database_behind_pgbouncer(
        memsvc_postgres, memsvc_template.name, "memsvc_bouncer"
    ) as dsn:
        settings = settings_for_tests(dsn, pgbouncer=True, pool_max_size=12)
        async with MemoryService.open(settings, embedder=HashingEmbedder()) as service:
            yield service


async def test_concurrent_adds_lose_nothing_through_pgbouncer(
    bouncer_service: MemoryService, scope: Scope
) -> None:
    await bounded(
        concurrency.test_10_writers_x_20_adds_leave_200_memories(bouncer_service, scope), 90
    )


async def test_racing_identical_adds_leave_one_row_through_pgbouncer(
    bouncer_service: MemoryService, scope: Scope
) -> None:
    await bounded(concurrency.test_racing_identical_adds_leave_one_row(bouncer_service, scope), 60)


async def test_racing_puts_of_one_key_leave_one_row_through_pgbouncer(
    bouncer_service: MemoryService, scope: Scope
) -> None:
    await bounded(concurrency.test_racing_puts_of_one_key_leave_one_row(bouncer_service, scope), 60)


async def test_expected_version_lets_exactly_one_win_through_pgbouncer(
    bouncer_service: MemoryService, scope: Scope
) -> None:
    await bounded(
        concurrency.test_racing_updates_with_expected_version_let_exactly_one_win(
            bouncer_service, scope
        ),
        60,
    )


async def test_racing_patch_metadata_keeps_every_key_through_pgbouncer(
    bouncer_service: MemoryService, scope: Scope
) -> None:
    await bounded(
        concurrency.test_racing_patch_metadata_keeps_every_key(bouncer_service, scope), 60
    )


async def test_search_assemblies_and_checkpoints_work_through_pgbouncer(
    bouncer_service: MemoryService, scope: Scope
) -> None:
    memories = await bouncer_service.memories.add_many(
        scope, [f"metric units note {i}" for i in range(20)]
    )
    hits = await bouncer_service.memories.search(scope, "metric units", k=5, where={})
    assert len(hits) == 5
    assembly = await bouncer_service.assemblies.create(scope, "units")
    await asyncio.gather(
        *(bouncer_service.assemblies.add_members(assembly.id, [m.id]) for m in memories)
    )
    assert (await bouncer_service.assemblies.get(assembly.id)).member_count == 20
    checkpoint = await bouncer_service.checkpoints.create(scope, {"step": 1})
    assert (await bouncer_service.checkpoints.latest(scope)).id == checkpoint.id


@pytest.mark.slow
async def test_list_append_oracle_finds_no_anomaly_through_pgbouncer(
    bouncer_service: MemoryService,
) -> None:
    await bounded(check_memory_lists(bouncer_service, 1_500), 110)


async def test_as_of_reads_through_pgbouncer(bouncer_service: MemoryService, scope: Scope) -> None:
    # One statement per read: nothing depends on the server connection.
    await bounded(asof.test_deleted_memories_reappear_and_later_updates_vanish(
        bouncer_service, scope
    ), 60)
    await bounded(asof.test_a_transaction_counts_from_its_commit_not_its_start(
        bouncer_service, scope.with_session("s-43")
    ), 60)


async def test_as_of_matches_the_model_through_pgbouncer(bouncer_service: MemoryService) -> None:
    await bounded(
        asof.test_as_of_matches_a_model_of_concurrent_updates_and_deletes(bouncer_service), 90
    )
