"""What an open transaction can do to the change feed: bounded where PostgreSQL allows
it, reported (log, gauge, doctor) where it does not.

The feed delivers a change only once no transaction that could still write one
before it is running. Transactions of other databases, and prepared
transactions holding no lock on the ledgers, cannot: they must not hold the
feed back. A writing transaction of the feed's own database can: it holds the
feed back, and the feed says which one, with the fix.

Prepared transactions are off on the suite's server (max_prepared_transactions
= 0); their tests run on a second cluster that allows them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from memsvc import Change, MemoryService, Scope, Settings, telemetry
from memsvc.db import migrate
from memsvc.testing.postgres import TestPostgres, settings_for_tests
from tests.changes.clusters import Cluster
from tests.changes.helpers import (
    assert_exactly_once_in_order,
    committed_events,
    take,
    write_workload,
)

try:
    from pytest_asyncio import fixture as async_fixture
except ImportError:  # pragma: no cover
    async_fixture = pytest.fixture  # type: ignore[assignment]

GUARD_S = 20
REPORT_AFTER_S = 0.5


@pytest.fixture
def metrics() -> Iterator[InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    telemetry.configure(meter_provider=provider)
    yield reader
    telemetry.configure()
    provider.shutdown()


def stalled_points(reader: InMemoryMetricReader) -> list[Any]:
    data = reader.get_metrics_data()
    points: list[Any] = []
    for resource in data.resource_metrics if data else []:
        for scope_metrics in resource.scope_metrics:
            for metric in scope_metrics.metrics:
                if metric.name == "memsvc.changes.stalled":
                    points.extend(metric.data.data_points)
    return points


@contextlib.asynccontextmanager
async def open_transaction(dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """A transaction that has taken a transaction id, left open for the block."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("BEGIN")
        await conn.fetchval("SELECT pg_current_xact_id()")
        yield conn
    finally:
        with contextlib.suppress(Exception):
            await conn.execute("ROLLBACK")
        await conn.close()


async def test_a_long_transaction_in_another_database_does_not_hold_the_feed_back(
    service: MemoryService, scope: Scope, memsvc_postgres: TestPostgres
) -> None:
    async with open_transaction(memsvc_postgres.dsn):  # the server's own `postgres` database
        consumer = asyncio.create_task(take(service.changes(since="now"), 1, guard=GUARD_S))
        await asyncio.sleep(0.2)
        first = await service.memories.add(scope, "written while another database waits")
        assert [c.entity_id for c in await consumer] == [first.id]
        second = await service.memories.add(scope, "and another")
        everything = await take(service.changes(), 2, guard=GUARD_S)
        assert [c.entity_id for c in everything] == [first.id, second.id]


async def test_exactly_once_holds_while_reads_leave_another_databases_transaction_out(
    service: MemoryService, scope: Scope, memsvc_postgres: TestPostgres
) -> None:
    """With the plain watermark held by another database the whole time, the feed reads
    with the refined one while writers of its own database commit out of start order."""
    delivered: list[Change] = []

    async def consume() -> None:
        async with contextlib.aclosing(service.changes()) as feed:  # type: ignore[type-var]
            async for change in feed:
                delivered.append(change)

    async with open_transaction(memsvc_postgres.dsn):
        consumer = asyncio.create_task(consume())
        await asyncio.gather(*(write_workload(service, scope, seed, 40) for seed in range(4)))
        expected = await committed_events(service.dsn)
        async with asyncio.timeout(GUARD_S):
            while len(delivered) < len(expected):
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # anything delivered twice would arrive meanwhile
        consumer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await consumer
    assert_exactly_once_in_order(delivered, expected)


async def test_a_feed_held_back_by_its_own_database_reports_who_and_the_fix(
    settings: Settings,
    scope: Scope,
    metrics: InMemoryMetricReader,
    caplog: pytest.LogCaptureFixture,
) -> None:
    quick = settings.model_copy(update={"change_stall_report_s": REPORT_AFTER_S})
    assert quick.database_url is not None
    async with MemoryService.open(quick) as svc:
        async with open_transaction(quick.database_url) as blocker:
            pid = blocker.get_server_pid()
            held = await svc.memories.add(scope, "committed behind the open transaction")
            with caplog.at_level(logging.WARNING, logger="memsvc.changes.feed"):
                consumer = asyncio.create_task(take(svc.changes(), 1, guard=GUARD_S))
                await asyncio.sleep(REPORT_AFTER_S * 4)
                assert not consumer.done()  # it may write before the change: it holds it back

                points = stalled_points(metrics)
                assert [p.attributes["memsvc.feed.holder"] for p in points] == [f"pid {pid}"]
                assert points[0].attributes["memsvc.db_schema"] == "memsvc"
                assert points[0].value >= REPORT_AFTER_S
                warned = [r.getMessage() for r in caplog.records if "held back" in r.getMessage()]
                assert any(f"pg_terminate_backend({pid})" in text for text in warned)

                report = await svc.maintenance.doctor()
                (check,) = [c for c in report.checks if c.name == "change feed"]
                assert check.status == "problem"
                assert f"session pid {pid}" in check.detail
                assert "1 committed events wait" in check.detail
                assert f"pg_terminate_backend({pid})" in check.detail
                assert not report.ok

            await blocker.execute("COMMIT")
            changes = await consumer
        assert [c.entity_id for c in changes] == [held.id]
        assert stalled_points(metrics) == []
        after = await svc.maintenance.doctor()
        (check,) = [c for c in after.checks if c.name == "change feed"]
        assert check.status == "ok"


# ----------------------------------------------------------- prepared transactions


@async_fixture
async def prepared_ready(other_cluster: Cluster) -> AsyncIterator[Settings]:
    """A migrated database on the cluster that allows prepared transactions."""
    name, dsn = await other_cluster.create_database()
    settings = settings_for_tests(dsn, change_stall_report_s=REPORT_AFTER_S)
    await asyncio.to_thread(migrate.upgrade, settings, dsn)
    try:
        yield settings
    finally:
        await _rollback_prepared(other_cluster.dsn)
        await other_cluster.drop_database(name)


async def _rollback_prepared(server_dsn: str) -> None:
    """Roll back every prepared transaction the test left, database by database."""
    conn = await asyncpg.connect(server_dsn)
    try:
        rows = await conn.fetch("SELECT gid, database FROM pg_prepared_xacts")
    finally:
        await conn.close()
    for row in rows:
        target = await asyncpg.connect(server_dsn.replace("/postgres?", f"/{row['database']}?"))
        try:
            await target.execute(f"ROLLBACK PREPARED '{row['gid']}'")
        finally:
            await target.close()


async def _prepare(dsn: str, gid: str, statement: str | None = None) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("BEGIN")
        await conn.fetchval("SELECT pg_current_xact_id()")
        if statement is not None:
            await conn.execute(statement)
        await conn.execute(f"PREPARE TRANSACTION '{gid}'")
    finally:
        await conn.close()


async def test_orphaned_prepared_transactions_that_wrote_no_change_do_not_hold_the_feed(
    prepared_ready: Settings, scope: Scope, other_cluster: Cluster
) -> None:
    assert prepared_ready.database_url is not None
    # One in this database that touched no ledger, one in another database.
    await _prepare(prepared_ready.database_url, f"idle-{uuid.uuid4().hex[:8]}")
    await _prepare(other_cluster.dsn, f"elsewhere-{uuid.uuid4().hex[:8]}")
    async with MemoryService.open(prepared_ready) as svc:
        memory = await svc.memories.add(scope, "written after two orphans")
        changes = await take(svc.changes(), 1, guard=GUARD_S)
        assert [c.entity_id for c in changes] == [memory.id]
        report = await svc.maintenance.doctor()
        (check,) = [c for c in report.checks if c.name == "change feed"]
        assert check.status == "ok"


async def test_a_prepared_transaction_holding_a_change_is_reported_with_its_fix(
    prepared_ready: Settings, scope: Scope
) -> None:
    assert prepared_ready.database_url is not None
    gid = f"orphan-{uuid.uuid4().hex[:8]}"
    async with MemoryService.open(prepared_ready) as svc:
        async with svc.pool.acquire() as conn:
            await conn.execute("BEGIN")
            pending = await svc.memories.add(scope, "prepared, never committed", conn=conn)
            await conn.execute(f"PREPARE TRANSACTION '{gid}'")
        held = await svc.memories.add(scope, "committed behind the prepared one")
        consumer = asyncio.create_task(take(svc.changes(), 2, guard=GUARD_S))
        await asyncio.sleep(REPORT_AFTER_S * 2)
        assert not consumer.done()

        report = await svc.maintenance.doctor()
        (check,) = [c for c in report.checks if c.name == "change feed"]
        assert check.status == "problem"
        assert f"prepared transaction {gid!r}" in check.detail
        assert f"COMMIT PREPARED '{gid}'" in check.detail
        assert f"ROLLBACK PREPARED '{gid}'" in check.detail

        async with svc.pool.acquire() as conn:
            await conn.execute(f"COMMIT PREPARED '{gid}'")
        changes = await consumer
    assert {c.entity_id for c in changes} == {pending.id, held.id}
