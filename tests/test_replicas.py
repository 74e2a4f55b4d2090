"""Reads on streaming replicas: routing, read-your-writes, lag and failures.

One primary and one hot standby (``pg_basebackup -R`` from the embedded
server's binaries) serve the whole module; each test works in a database of
its own cloned on the primary, which the standby replays like everything else.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
import numpy as np
import pytest

from memsvc import MemoryService, NotFoundError, Scope, Settings, ValidationError
from memsvc.db import migrate
from memsvc.embedding import HashingEmbedder
from memsvc.testing.postgres import (
    MigratedTemplate,
    TestPostgres,
    run_in_own_loop,
    settings_for_tests,
    with_database,
)
from memsvc.testing.replica import ReplicatedPostgres
from tests.test_row_level_security import as_user

try:
    from pytest_asyncio import fixture as async_fixture
except ImportError:  # pragma: no cover
    async_fixture = pytest.fixture  # type: ignore[assignment]

CATCH_UP_LIMIT_S = 120.0


@dataclass
class Pair:
    """A test database on the primary and the same database on the replica."""

    servers: ReplicatedPostgres
    primary: str
    replica: str

    def settings(self, **overrides: Any) -> Settings:
        values: dict[str, Any] = {"replica_urls": [self.replica], "pool_max_size": 25}
        values.update(overrides)
        return settings_for_tests(self.primary, **values)


@pytest.fixture(scope="module")
def replicated() -> Iterator[tuple[ReplicatedPostgres, MigratedTemplate]]:
    servers = ReplicatedPostgres.start()
    template = MigratedTemplate(TestPostgres(servers.primary_dsn, []))
    run_in_own_loop(template.build())
    yield servers, template
    servers.stop()


@async_fixture
async def pair(replicated: tuple[ReplicatedPostgres, MigratedTemplate]) -> AsyncIterator[Pair]:
    servers, template = replicated
    async with template.fresh_database() as dsn:
        name = dsn.split("?")[0].rsplit("/", 1)[1]
        found = Pair(servers, dsn, with_database(servers.replica_dsn, name))
        await caught_up(found)
        yield found


async def caught_up(pair: Pair) -> None:
    """Wait until the replica has replayed everything the primary has written so far."""
    await _replica_reaches(pair, "pg_current_wal_insert_lsn()", "pg_last_wal_replay_lsn()")


async def received(pair: Pair) -> None:
    """Wait until the replica has received (not necessarily replayed) the primary's WAL."""
    await _replica_reaches(pair, "pg_current_wal_flush_lsn()", "pg_last_wal_receive_lsn()")


async def _replica_reaches(pair: Pair, primary_position: str, replica_position: str) -> None:
    primary = await asyncpg.connect(pair.servers.primary_dsn)
    try:
        target = await primary.fetchval(f"SELECT {primary_position}")
    finally:
        await primary.close()
    replica = await asyncpg.connect(pair.servers.replica_dsn)
    try:
        async with asyncio.timeout(CATCH_UP_LIMIT_S):
            while await replica.fetchval(f"SELECT {replica_position}") < target:
                await asyncio.sleep(0.01)
    finally:
        await replica.close()


async def set_replay(pair: Pair, paused: bool) -> None:
    replica = await asyncpg.connect(pair.servers.replica_dsn)
    try:
        call = "pg_wal_replay_pause" if paused else "pg_wal_replay_resume"
        await replica.execute(f"SELECT {call}()")
    finally:
        await replica.close()


def opened(settings: Settings) -> Any:
    return MemoryService.open(settings, embedder=HashingEmbedder(settings.embedding_dim))


def replica_reads(svc: MemoryService) -> int:
    return sum(replica.reads for replica in svc.reads.status())


SCOPE = Scope(tenant="acme", project="bridge", agent="planner", session="s-1")


# ------------------------------------------------------------------ settings


def test_replica_urls_come_from_the_environment_as_a_list_or_csv(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEMSVC_DATABASE_URL", "postgresql://primary/db")
    monkeypatch.setenv("MEMSVC_REPLICA_URLS", "postgresql://r1/db, postgresql://r2/db")
    assert Settings().replica_urls == ["postgresql://r1/db", "postgresql://r2/db"]
    monkeypatch.setenv("MEMSVC_REPLICA_URLS", '["postgresql://r3/db"]')
    assert Settings().replica_urls == ["postgresql://r3/db"]


def test_a_replica_url_that_is_not_postgres_is_refused() -> None:
    with pytest.raises(ValidationError, match="replica_urls"):
        Settings(replica_urls=["redis://localhost:6379"])


# ------------------------------------------------------------------- routing


async def test_reads_run_on_the_replica_and_see_the_services_writes(pair: Pair) -> None:
    # A generous wait: every read must be served by the replica once it replays.
    async with opened(pair.settings(replica_wait_s=60)) as svc:
        memory = await svc.memories.add(SCOPE, "the user prefers metric units")
        assembly = await svc.assemblies.create(SCOPE, "units", memory_ids=[memory.id])
        on_replica, on_primary = replica_reads(svc), svc.reads.primary_reads
        assert await svc.memories.get(memory.id) == memory
        assert [m.id for m in await svc.memories.list(SCOPE)] == [memory.id]
        assert await svc.memories.count(SCOPE) == 1
        assert [e.kind for e in await svc.memories.history(memory.id)] == ["created"]
        hits = await svc.memories.search(SCOPE, "metric units", k=3)
        assert [hit.memory.id for hit in hits] == [memory.id]
        assert (await svc.assemblies.get(assembly.id)).member_count == 1
        assert [m.id for m in await svc.assemblies.members(assembly.id)] == [memory.id]
        assert replica_reads(svc) - on_replica == 7
        assert svc.reads.primary_reads == on_primary
        assert svc.reads.status()[0].state == "ok"


async def test_reads_by_validity_run_on_the_replica_and_see_supersessions(pair: Pair) -> None:
    march, june = datetime(2024, 3, 1, tzinfo=UTC), datetime(2024, 6, 1, tzinfo=UTC)
    async with opened(pair.settings(replica_wait_s=60)) as svc:
        paris = await svc.memories.add(SCOPE, "Ana lives in Paris", valid_from=march)
        berlin = await svc.memories.supersede(paris.id, "Ana lives in Berlin", valid_from=june)
        on_replica = replica_reads(svc)
        hits = await svc.memories.search(SCOPE, "Ana lives", k=5)
        assert [h.memory.id for h in hits] == [berlin.id]
        april = datetime(2024, 4, 1, tzinfo=UTC)
        hits = await svc.memories.search(SCOPE, "Ana lives", k=5, valid_at=april)
        assert [h.memory.id for h in hits] == [paris.id]
        assert await svc.memories.count(SCOPE, valid="all") == 2
        assert (await svc.memories.get(paris.id)).superseded_by == berlin.id
        assert replica_reads(svc) - on_replica == 4


async def test_writes_and_reads_on_a_callers_connection_stay_on_the_primary(
    pair: Pair,
) -> None:
    async with opened(pair.settings()) as svc:
        await set_replay(pair, paused=True)
        try:
            async with svc.pool.acquire() as conn, conn.transaction():
                memory = await svc.memories.add(SCOPE, "inside my transaction", conn=conn)
                assert (await svc.memories.get(memory.id, conn=conn)).id == memory.id
                assert await svc.memories.count(SCOPE, conn=conn) == 1
        finally:
            await set_replay(pair, paused=False)
        assert replica_reads(svc) == 0


async def test_read_connection_is_a_replica_when_one_can_serve(pair: Pair) -> None:
    async with opened(pair.settings(replica_wait_s=60)) as svc:
        await svc.memories.add(SCOPE, "written first")
        async with svc.reads.connection() as conn:
            assert await conn.fetchval("SELECT pg_is_in_recovery()") is True
            # This service's write has been replayed where it reads.
            assert await conn.fetchval("SELECT count(*) FROM memsvc.memories") == 1


async def test_without_replicas_every_read_is_the_primarys(settings: Settings) -> None:
    async with opened(settings) as svc:
        memory = await svc.memories.add(SCOPE, "no replica here")
        assert (await svc.memories.get(memory.id)).id == memory.id
        async with svc.reads.connection() as conn:
            assert await conn.fetchval("SELECT pg_is_in_recovery()") is False
        assert svc.reads.status() == []


async def test_a_replica_down_at_open_is_skipped(settings: Settings, tmp_path: Any) -> None:
    gone = f"postgresql://postgres:@/postgres?host={tmp_path}"
    replicated = settings.model_copy(update={"replica_urls": [gone]})
    async with opened(replicated) as svc:
        memory = await svc.memories.add(SCOPE, "the replica never answered")
        assert (await svc.memories.get(memory.id)).id == memory.id
        assert await svc.memories.count(SCOPE) == 1
        assert svc.reads.status()[0].state == "down"
        assert svc.reads.primary_reads == 2


# --------------------------------------------------------- read-your-writes


async def test_read_your_writes_under_20_concurrent_writer_reader_pairs(pair: Pair) -> None:
    """Each writer updates its memory; its reader, told the new version, must see it."""
    rounds = 8
    settings = pair.settings(replica_wait_s=30, pool_max_size=30)
    async with opened(settings) as svc:
        memories = [await svc.memories.add(SCOPE, f"pair p{i} version 1") for i in range(20)]
        stale: list[tuple[int, int, int]] = []

        async def writer(i: int, told: asyncio.Queue[int]) -> None:
            current = memories[i]
            for _ in range(rounds):
                current = await svc.memories.update(
                    current.id, content=f"pair p{i} version {current.version + 1}"
                )
                await told.put(current.version)
                await asyncio.sleep(random.random() * 0.005)
            await told.put(-1)

        async def reader(i: int, told: asyncio.Queue[int]) -> None:
            while (version := await told.get()) != -1:
                seen = await svc.memories.get(memories[i].id)
                if seen.version < version:
                    stale.append((i, version, seen.version))
                # The writer may be further on: search words every version holds.
                hits = await svc.memories.search(SCOPE, f"pair p{i}", k=40, mode="text")
                listed = {h.memory.id: h.memory.version for h in hits}
                if listed.get(memories[i].id, 0) < version:
                    stale.append((i, version, listed.get(memories[i].id, 0)))

        queues: list[asyncio.Queue[int]] = [asyncio.Queue() for _ in range(20)]
        await asyncio.gather(
            *(writer(i, queues[i]) for i in range(20)),
            *(reader(i, queues[i]) for i in range(20)),
        )
        assert stale == []
        # The replica did serve them (the test would see nothing otherwise).
        assert replica_reads(svc) > 0
        assert replica_reads(svc) + svc.reads.primary_reads == 20 * rounds * 2


async def test_paused_replay_sends_reads_to_the_primary(pair: Pair) -> None:
    await set_replay(pair, paused=True)
    try:
        async with opened(pair.settings(replica_wait_s=0.2)) as svc:
            memory = await svc.memories.add(SCOPE, "written while replay is paused")
            # Read-your-writes: the replica cannot reach the write, the primary serves.
            assert (await svc.memories.get(memory.id)).id == memory.id
            assert svc.reads.primary_reads == 1
            assert replica_reads(svc) == 0

        await received(pair)
        # Control: a reader that neither waits for writes nor minds lag sees the
        # paused replica's stale copy, so the checks above could have failed.
        careless = pair.settings(read_your_writes=False, replica_max_lag_s=3600)
        async with opened(careless) as svc:
            with pytest.raises(NotFoundError):
                await svc.memories.get(memory.id)
            assert replica_reads(svc) == 1

        # Lag: WAL received but not replayed makes the replica lag; with no lag
        # allowed it is skipped, though this service wrote nothing.
        strict = pair.settings(read_your_writes=False, replica_max_lag_s=0)
        async with opened(strict) as svc:
            assert (await svc.memories.get(memory.id)).id == memory.id
            assert svc.reads.status()[0].state == "lagging"
            assert svc.reads.primary_reads == 1
    finally:
        await set_replay(pair, paused=False)
    await caught_up(pair)
    async with opened(pair.settings(read_your_writes=False, replica_max_lag_s=0)) as svc:
        assert (await svc.memories.get(memory.id)).id == memory.id
        assert replica_reads(svc) == 1


async def test_writes_of_your_own_are_waited_for_once_announced(pair: Pair) -> None:
    async with opened(pair.settings(replica_wait_s=0.2, replica_max_lag_s=3600)) as svc:
        await set_replay(pair, paused=True)
        try:
            async with svc.pool.acquire() as conn, conn.transaction():
                mine = await svc.memories.add(SCOPE, "committed on my connection", conn=conn)
            await received(pair)
            # Not announced: the service cannot know, and the paused replica answers.
            with pytest.raises(NotFoundError):
                await svc.memories.get(mine.id)
            svc.reads.wrote_elsewhere()
            assert (await svc.memories.get(mine.id)).id == mine.id
            assert svc.reads.primary_reads == 1
        finally:
            await set_replay(pair, paused=False)


async def test_reads_after_an_erasure_never_find_it_on_a_replica(pair: Pair) -> None:
    async with opened(pair.settings(replica_wait_s=0.2, replica_max_lag_s=3600)) as svc:
        scope = Scope("erased-tenant", "p")
        memory = await svc.memories.add(scope, "to be erased")
        await caught_up(pair)
        await set_replay(pair, paused=True)
        try:
            receipt = await svc.erase(scope)
            assert receipt.verified
            await received(pair)
            # The paused replica still holds the memory: the read must not go there.
            with pytest.raises(NotFoundError):
                await svc.memories.get(memory.id)
            assert await svc.memories.count(scope) == 0
        finally:
            await set_replay(pair, paused=False)


async def test_row_level_security_holds_on_the_replica(
    replicated: tuple[ReplicatedPostgres, MigratedTemplate],
) -> None:
    servers, _ = replicated
    suffix = uuid.uuid4().hex[:10]
    name, role = f"memsvc_rls_{suffix}", f"memsvc_rt_{suffix}"
    primary = TestPostgres(servers.primary_dsn, [])
    dsn = await primary.create_database(name)
    await asyncio.to_thread(migrate.upgrade, settings_for_tests(dsn, row_level_security=True), dsn)
    admin = await asyncpg.connect(dsn)
    try:
        # Not the owner, not a superuser, no BYPASSRLS: the policies bind it.
        await admin.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS")
        await admin.execute(f"GRANT USAGE ON SCHEMA memsvc TO {role}")
        await admin.execute(
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA memsvc TO {role}"
        )
        await admin.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA memsvc TO {role}")
    finally:
        await admin.close()
    replica_dsn = with_database(servers.replica_dsn, name)
    runtime = Pair(servers, as_user(dsn, role), as_user(replica_dsn, role))
    # The role must exist on the replica before the service connects there:
    # a replica that refuses the login counts as down, and reads skip it.
    await caught_up(runtime)
    try:
        settings = runtime.settings(row_level_security=True, replica_wait_s=60)
        async with opened(settings) as svc:
            acme, globex = Scope("acme", "p"), Scope("globex", "p")
            mine = await svc.memories.add(acme, "acme's plan")
            theirs = await svc.memories.add(globex, "globex's plan")
            before = replica_reads(svc)
            assert (await svc.memories.get(mine.id, tenant="acme")).id == mine.id
            with pytest.raises(NotFoundError):
                await svc.memories.get(theirs.id, tenant="acme")
            hits = await svc.memories.search(acme, "plan", k=10, include="descendants")
            assert [hit.memory.id for hit in hits] == [mine.id]
            assert await svc.memories.count(Scope("acme"), include="descendants") == 1
            assert replica_reads(svc) - before == 4
            assert svc.reads.primary_reads == 0
    finally:
        await primary.drop_database(name)
        admin = await asyncpg.connect(servers.primary_dsn)
        try:
            await admin.execute(f"DROP ROLE IF EXISTS {role}")
        finally:
            await admin.close()


async def test_doctor_reports_each_replica(pair: Pair, tmp_path: Any) -> None:
    gone = f"postgresql://postgres:@/postgres?host={tmp_path}"
    async with opened(pair.settings(replica_urls=[pair.replica, gone])) as svc:
        report = await svc.maintenance.doctor()
        replicas = [check for check in report.checks if check.name.startswith("replica ")]
        assert [check.status for check in replicas] == ["ok", "warning"]
        assert "streaming standby" in replicas[0].detail
        assert "unreachable" in replicas[1].detail
        assert report.ok


async def stop_wal_receiver(pair: Pair) -> str:
    """Empty the live replica's primary_conninfo (its WAL receiver stops); the old value."""
    replica = await asyncpg.connect(pair.servers.replica_dsn)
    try:
        original: str = await replica.fetchval("SHOW primary_conninfo")
        await replica.execute("ALTER SYSTEM SET primary_conninfo = ''")
        await replica.execute("SELECT pg_reload_conf()")
        async with asyncio.timeout(CATCH_UP_LIMIT_S):
            while await replica.fetchval("SELECT count(*) FROM pg_stat_wal_receiver"):
                await asyncio.sleep(0.05)
    finally:
        await replica.close()
    return original


async def restart_wal_receiver(pair: Pair, conninfo: str) -> None:
    replica = await asyncpg.connect(pair.servers.replica_dsn)
    try:
        statement = await replica.fetchval(
            "SELECT format('ALTER SYSTEM SET primary_conninfo = %L', $1::text)", conninfo
        )
        await replica.execute(statement)
        await replica.execute("SELECT pg_reload_conf()")
        async with asyncio.timeout(CATCH_UP_LIMIT_S):
            while not await replica.fetchval(
                "SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming'"
            ):
                await asyncio.sleep(0.05)
    finally:
        await replica.close()
    await caught_up(pair)


async def test_a_replica_whose_wal_receiver_stopped_is_not_read_and_doctor_says_why(
    pair: Pair,
) -> None:
    conninfo = await stop_wal_receiver(pair)
    try:
        # Neither read-your-writes nor a lag bound the replica could exceed:
        # only its not receiving WAL keeps reads off its stale copy.
        careless = pair.settings(read_your_writes=False, replica_max_lag_s=3600)
        async with opened(careless) as svc:
            memory = await svc.memories.add(SCOPE, "written after the replica stopped receiving")
            assert (await svc.memories.get(memory.id)).id == memory.id
            assert replica_reads(svc) == 0
            assert svc.reads.status()[0].state == "not receiving"

            report = await svc.maintenance.doctor()
            (check,) = [c for c in report.checks if c.name.startswith("replica ")]
            assert check.status == "warning"
            assert "not receiving WAL" in check.detail
            assert "primary_conninfo" in check.detail
    finally:
        await restart_wal_receiver(pair, conninfo)
    # Streaming again: the replica serves reads again.
    async with opened(pair.settings(read_your_writes=False, replica_max_lag_s=3600)) as svc:
        assert (await svc.memories.get(memory.id)).id == memory.id
        assert replica_reads(svc) == 1
        assert svc.reads.status()[0].state == "ok"


async def test_wal_without_commits_does_not_make_a_replica_look_behind(pair: Pair) -> None:
    # A quiet system still writes WAL (checkpoints, vacuum, messages) with no
    # commit in it. A replica not yet past such WAL has every committed row:
    # it is not lagging, however old its last replayed commit is.
    settings = pair.settings(read_your_writes=False, replica_max_lag_s=0.5,
                             replica_check_interval_s=0.01)
    async with opened(settings) as svc:
        memory = await svc.memories.add(SCOPE, "the last commit for a while")
        await caught_up(pair)
        await asyncio.sleep(1.0)  # longer than replica_max_lag_s since that commit
        await set_replay(pair, paused=True)
        try:
            primary = await asyncpg.connect(pair.servers.primary_dsn)
            try:  # WAL that commits nothing, flushed
                await primary.execute("SELECT pg_logical_emit_message(false, 'memsvc', 'x')")
                await primary.execute("CHECKPOINT")
            finally:
                await primary.close()
            await received(pair)
            assert (await svc.memories.get(memory.id)).id == memory.id
            assert svc.reads.status()[0].state == "ok"
            assert replica_reads(svc) == 1
        finally:
            await set_replay(pair, paused=False)


# ----------------------------------------------------------------- failures


async def test_a_replica_killed_mid_load_fails_no_read(pair: Pair) -> None:
    settings = pair.settings(replica_wait_s=30, replica_retry_s=0.5)
    async with opened(settings) as svc:
        stored = [await svc.memories.add(SCOPE, f"memory {i}") for i in range(30)]
        vectors = [np.asarray(m.embedding, dtype=np.float32) for m in stored]
        await caught_up(pair)
        failures: list[BaseException] = []
        wrong: list[uuid.UUID] = []
        reads = 0
        killed = asyncio.Event()
        after_kill = 0

        async def client(seed: int) -> None:
            nonlocal reads, after_kill
            rng = random.Random(seed)
            while after_kill < 200:
                i = rng.randrange(len(stored))
                try:
                    if rng.random() < 0.5:
                        hits = await svc.memories.search(SCOPE, vectors[i], k=1)
                        found = hits[0].memory.id
                    else:
                        found = (await svc.memories.get(stored[i].id)).id
                except Exception as exc:
                    failures.append(exc)
                    return
                if found != stored[i].id:
                    wrong.append(found)
                reads += 1
                if killed.is_set():
                    after_kill += 1

        async def kill_after_some_replica_reads() -> None:
            while replica_reads(svc) < 50:
                await asyncio.sleep(0.005)
            await asyncio.to_thread(pair.servers.kill_replica)
            killed.set()

        try:
            await asyncio.gather(*(client(seed) for seed in range(10)),
                                 kill_after_some_replica_reads())
            assert failures == []
            assert wrong == []
            assert svc.reads.status()[0].state == "down"
            assert svc.reads.primary_reads > 0
        finally:
            if not pair.servers.replica_running():
                await asyncio.to_thread(pair.servers.start_replica)
        await caught_up(pair)
        # Retried later: once the replica is back it serves reads again.
        before = replica_reads(svc)
        async with asyncio.timeout(CATCH_UP_LIMIT_S):
            while replica_reads(svc) == before:
                assert (await svc.memories.get(stored[0].id)).id == stored[0].id
                await asyncio.sleep(0.05)
        assert svc.reads.status()[0].state == "ok"


async def test_as_of_reads_stay_on_the_primary(pair: Pair) -> None:
    async with opened(pair.settings(replica_wait_s=0.2, replica_max_lag_s=3600)) as svc:
        await set_replay(pair, paused=True)
        try:
            async with svc.pool.acquire() as conn, conn.transaction():
                mine = await svc.memories.add(SCOPE, "committed on my connection", conn=conn)
            await received(pair)
            then = datetime.now(UTC)
            # The control: a routed read goes to the paused replica and misses it.
            with pytest.raises(NotFoundError):
                await svc.memories.get(mine.id)
            # What was committed at `then` includes it: as-of reads ask the primary.
            assert (await svc.memories.get(mine.id, as_of=then)).id == mine.id
            assert [m.id for m in await svc.memories.list(SCOPE, as_of=then)] == [mine.id]
            assert await svc.memories.count(SCOPE, as_of=then) == 1
        finally:
            await set_replay(pair, paused=False)
