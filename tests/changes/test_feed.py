"""The change feed: what it delivers, in which order, from where, with which values."""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from datetime import timedelta
from urllib.parse import urlsplit

import asyncpg
import pytest

from memsvc import Change, MemoryService, Scope, Settings, ValidationError
from memsvc.changes.signal import CHANNEL, NOTIFY_INTERVAL_S
from memsvc.sync import SyncMemoryService
from memsvc.testing.postgres import (
    MigratedTemplate,
    TestPostgres,
    settings_for_tests,
    with_database,
)
from tests.changes.helpers import take
from tests.reliability.servers import database_behind_pgbouncer


async def test_feed_delivers_memory_assembly_and_checkpoint_changes_in_commit_order(
    service: MemoryService, scope: Scope
) -> None:
    m = await service.memories.add(scope, "the user prefers metric units")
    await service.memories.update(m.id, content="the user prefers SI units")
    asm = await service.assemblies.create(scope, "units", memory_ids=[m.id])
    cp = await service.checkpoints.create(scope, {"step": 1}, description="before edit")
    await service.memories.delete(m.id)  # also drops it from the assembly
    await service.assemblies.delete(asm.id)

    changes = await take(service.changes(), 7)
    seen = [(c.entity, c.entity_id, c.kind, c.version) for c in changes]
    assert seen == [
        ("memory", m.id, "created", 1),
        ("memory", m.id, "updated", 2),
        ("assembly", asm.id, "created", 1),
        ("checkpoint", cp.id, "created", 1),
        # One transaction: the delete and the assembly losing its member
        # share a change key; memory events come first within a key.
        ("memory", m.id, "deleted", 2),
        ("assembly", asm.id, "updated", 2),
        ("assembly", asm.id, "deleted", 2),
    ]
    assert all(c.scope == scope for c in changes)
    assert all(c.memory_id == c.entity_id for c in changes)
    assert len({c.cursor for c in changes}) == 7


async def test_resuming_from_a_cursor_continues_after_that_change(
    service: MemoryService, scope: Scope
) -> None:
    ids = [(await service.memories.add(scope, f"fact {i}")).id for i in range(5)]
    first = await take(service.changes(), 2)
    rest = await take(service.changes(since=first[-1].cursor), 3)
    assert [c.memory_id for c in first + rest] == ids


async def test_since_now_skips_what_committed_before(service: MemoryService, scope: Scope) -> None:
    await service.memories.add(scope, "old news")
    # "now" is fixed when the iterator is first advanced (its first read).
    consumer = asyncio.create_task(take(service.changes(since="now"), 1))
    await asyncio.sleep(0.3)
    new = await service.memories.add(scope, "fresh news")
    changes = await consumer
    assert [c.memory_id for c in changes] == [new.id]


async def test_scope_filter_and_include_modes(service: MemoryService) -> None:
    agent = Scope(tenant="acme", project="p", agent="a")
    session = agent.with_session("s1")
    other = Scope(tenant="acme", project="p", agent="b")
    other_tenant = Scope(tenant="globex", project="p", agent="a")
    in_agent = await service.memories.add(agent, "agent level")
    in_session = await service.memories.add(session, "session level")
    await service.memories.add(other, "sibling agent")
    await service.memories.add(other_tenant, "other tenant")
    last = await service.memories.add(agent, "end marker")

    below = await take(service.changes(agent), 3)
    assert [c.memory_id for c in below] == [in_agent.id, in_session.id, last.id]
    exact = await take(service.changes(agent, include="exact"), 2)
    assert [c.memory_id for c in exact] == [in_agent.id, last.id]
    up = await take(service.changes(session, include="ancestors"), 3)
    assert [c.memory_id for c in up] == [in_agent.id, in_session.id, last.id]


async def test_with_values_gives_the_values_after_each_change(
    service: MemoryService, scope: Scope
) -> None:
    m = await service.memories.add(scope, "v1 text", metadata={"n": 1})
    await service.memories.update(m.id, content="v2 text")
    await service.memories.patch_metadata(m.id, {"n": 3})
    await service.memories.delete(m.id)
    changes = await take(service.changes(with_values=True), 4)
    assert [c.values["content"] if c.values else None for c in changes] == [
        "v1 text",
        "v2 text",
        "v2 text",
        None,
    ]
    assert changes[2].values is not None and changes[2].values["metadata"] == {"n": 3}
    plain = await take(service.changes(), 1)
    assert plain[0].values is None
    asm = await service.assemblies.create(scope, "group", description="what it is for")
    cp = await service.checkpoints.create(scope, {"step": 2})
    later = await take(service.changes(since=changes[-1].cursor, with_values=True), 2)
    assert [c.entity_id for c in later] == [asm.id, cp.id]
    assert later[0].values is not None and later[0].values["description"] == "what it is for"
    assert later[1].values is not None and later[1].values["data"] == {"step": 2}


async def test_values_say_when_a_memory_was_forgotten_and_never_carry_a_later_merge(
    service: MemoryService, scope: Scope
) -> None:
    vector = [1.0] + [0.0] * 383
    m = await service.memories.add(scope, "the build took 41 s", importance=0.2,
                                   embedding=vector)
    await service.memories.add(scope, "the build took 41 s!", embedding=vector,
                               dedupe="semantic")
    await service.policies.set(scope, half_life=timedelta(days=1))
    forgotten = await service.maintenance.forget(
        scope, now=m.created_at + timedelta(days=3), below=0.2
    )
    assert forgotten.ids == [m.id]
    await service.memories.update(m.id, pinned=True)
    changes = await take(service.changes(with_values=True), 4)
    values = [c.values or {} for c in changes]
    keys = {"content", "metadata", "importance", "key", "expires_at", "valid_from", "valid_to",
            "supersedes", "superseded_by", "pinned", "forgotten_at"}
    assert [set(v) for v in values] == [keys] * 4
    # Versions 1-3 come from the next event's prior, version 4 from the row.
    assert [v["forgotten_at"] is not None for v in values] == [False, False, True, False]
    assert [v["pinned"] for v in values] == [False, False, False, True]


async def test_a_write_wakes_the_consumer_without_polling(settings: Settings, scope: Scope) -> None:
    # With an hour between polls only the NOTIFY wake-up can deliver in time
    # (the guard in take() fails the test otherwise).
    quiet = settings.model_copy(update={"change_poll_interval_s": 3600.0})
    async with MemoryService.open(quiet) as svc:
        feed = svc.changes(since="now")
        consumer = asyncio.create_task(take(feed, 1, guard=30))
        await asyncio.sleep(0.2)  # let the consumer reach its wait
        m = await svc.memories.add(scope, "wake up")
        changes = await consumer
    assert changes[0].memory_id == m.id


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"since": "not-a-cursor"}, "since"),
        ({"since": 42}, "since"),
        ({"include": "sideways"}, "include"),
        ({"scope": "acme"}, "scope"),
        ({"with_values": "yes"}, "with_values"),
    ],
)
def test_bad_arguments_are_rejected_naming_the_field(
    service: MemoryService, kwargs: dict[str, object], field: str
) -> None:
    with pytest.raises(ValidationError) as raised:
        service.changes(**kwargs)  # type: ignore[arg-type]
    assert raised.value.field == field


async def test_held_back_event_is_delivered_after_the_older_transaction_commits(
    service: MemoryService, scope: Scope
) -> None:
    """A transaction that started (took its id) first and commits last is not skipped."""
    async with service.pool.acquire() as early:
        tx = early.transaction()
        await tx.start()
        slow = await service.memories.add(scope, "started first, commits last", conn=early)
        fast = await service.memories.add(scope, "started second, commits first")
        feed = service.changes()
        consumer = asyncio.create_task(take(feed, 2))
        await asyncio.sleep(0.3)
        assert not consumer.done()  # the fast event waits behind the open transaction
        await tx.commit()
        changes = await consumer
    assert {c.memory_id for c in changes} == {slow.id, fast.id}


async def test_a_writer_that_waited_for_a_row_lock_stays_in_version_order(
    service: MemoryService, scope: Scope
) -> None:
    """T1 takes its transaction id first, then waits for T2's lock on the memory.

    T1 then writes version 3 with a smaller transaction id than T2's version
    2; the feed must still deliver version 2 before version 3.
    """
    m = await service.memories.add(scope, "contended")
    async with service.pool.acquire() as c1, service.pool.acquire() as c2:
        t1 = c1.transaction()
        await t1.start()
        await service.memories.add(scope, "gives T1 its id", conn=c1)
        xid1 = int(await c1.fetchval("SELECT pg_current_xact_id()::text"))
        t2 = c2.transaction()
        await t2.start()
        await service.memories.update(m.id, content="by T2", conn=c2)
        xid2 = int(await c2.fetchval("SELECT pg_current_xact_id()::text"))
        waiting = asyncio.create_task(service.memories.update(m.id, content="by T1", conn=c1))
        await asyncio.sleep(0.3)
        assert not waiting.done()  # T1 waits for T2's row lock
        await t2.commit()
        assert (await waiting).version == 3
        await t1.commit()
    assert xid1 < xid2  # the scenario really has the later version written by the older id
    changes = await take(service.changes(), 4)
    versions = [c.version for c in changes if c.memory_id == m.id]
    assert versions == [1, 2, 3]


def test_the_sync_client_iterates_the_feed(settings: Settings, scope: Scope) -> None:
    with SyncMemoryService.open(settings) as svc:
        ids = [svc.memories.add(scope, f"sync fact {i}").id for i in range(3)]
        got: list[Change] = []
        with svc.changes(scope) as feed:
            for change in feed:
                got.append(change)
                if len(got) == 3:
                    break
    assert [c.memory_id for c in got] == ids


async def test_the_feed_works_behind_pgbouncer(
    memsvc_postgres: TestPostgres, memsvc_template: MigratedTemplate, scope: Scope
) -> None:
    async with database_behind_pgbouncer(
        memsvc_postgres, memsvc_template.name, "memsvc_feed"
    ) as dsn:
        # Transaction pooling: no LISTEN, the feed polls.
        polling = settings_for_tests(dsn, pgbouncer=True, change_poll_interval_s=0.05)
        async with MemoryService.open(polling) as svc:
            m = await svc.memories.add(scope, "through the bouncer")
            changes = await take(svc.changes(), 1)
            assert changes[0].memory_id == m.id
        # listen_url: LISTEN on a direct connection, reads through pgbouncer;
        # an hour between polls, so only the wake-up can deliver in time.
        database = urlsplit(dsn).path.lstrip("/")
        listening = polling.model_copy(
            update={
                "listen_url": with_database(memsvc_postgres.dsn, database),
                "change_poll_interval_s": 3600.0,
            }
        )
        async with MemoryService.open(listening) as svc:
            consumer = asyncio.create_task(take(svc.changes(since="now"), 1, guard=30))
            await asyncio.sleep(0.3)
            n = await svc.memories.add(scope, "woken through listen_url")
            assert (await consumer)[0].memory_id == n.id


async def test_memory_events_record_the_scope(service: MemoryService, scope: Scope) -> None:
    m = await service.memories.add(scope, "scoped")
    conn = await asyncpg.connect(service.dsn)
    try:
        row = await conn.fetchrow(
            "SELECT project_id, agent_id, session_id FROM memsvc.memory_events "
            "WHERE memory_id = $1",
            m.id,
        )
    finally:
        await conn.close()
    assert tuple(row) == (scope.project, scope.agent, scope.session)
    assert isinstance(m.id, uuid.UUID)


async def test_a_memory_id_used_again_after_a_delete_is_created_after_it_was_deleted(
    service: MemoryService, scope: Scope
) -> None:
    """T1 takes its transaction id first; T2 deletes the memory and commits; then T1
    adds a memory with the same id. Ordered by transaction id alone, T1's
    'created' would come before T2's 'deleted', and a consumer would end up
    believing the memory gone."""
    m = await service.memories.add(scope, "first life")
    async with service.pool.acquire() as c1:
        t1 = c1.transaction()
        await t1.start()
        await service.memories.add(scope, "gives T1 its id", conn=c1)
        xid1 = int(await c1.fetchval("SELECT pg_current_xact_id()::text"))
        assert await service.memories.delete(m.id)
        await service.memories.add(scope, "second life", id=m.id, conn=c1)
        await t1.commit()
    deleter = await service.pool.fetchval(
        "SELECT xmin::text FROM memsvc.memory_events WHERE memory_id = $1 AND kind = 'deleted'",
        m.id,
    )
    assert xid1 < int(deleter)  # the re-creating transaction has the older id
    changes = await take(service.changes(), 4)
    assert [c.kind for c in changes if c.memory_id == m.id] == ["created", "deleted", "created"]
    assert (await service.memories.get(m.id)).content == "second life"


async def test_an_erasure_reaches_scoped_consumers_as_erased_changes(
    service: MemoryService, scope: Scope
) -> None:
    project = Scope(scope.tenant, scope.project)
    m = await service.memories.add(scope, "to be erased")
    await service.memories.update(m.id, content="to be erased, edited")
    seen = await take(service.changes(project), 2)
    receipt = await service.erase(project)
    assert receipt.verified
    after = await take(service.changes(project, since=seen[-1].cursor), 1)
    assert [(c.kind, c.memory_id, c.version) for c in after] == [("erased", m.id, 2)]
    # The tombstone names the scope down to the level erased; below it, pseudonyms.
    erased_scope = after[0].scope
    assert (erased_scope.tenant, erased_scope.project) == (scope.tenant, scope.project)
    for level in (erased_scope.agent, erased_scope.session):
        assert level is not None and re.fullmatch(r"erased:[0-9a-f]{32}", level)


async def test_wake_ups_are_spaced_under_a_burst_and_the_last_write_still_wakes(
    settings: Settings, scope: Scope
) -> None:
    # Wake-ups sent back to back cost writers throughput (a commit and a
    # signal each); spaced NOTIFY_INTERVAL_S apart, one covers many writes.
    # The burst's last write must still be announced: with an hour between
    # polls only a wake-up delivers it within the guard.
    quiet = settings.model_copy(update={"change_poll_interval_s": 3600.0})
    counter = await asyncpg.connect(settings.database_url)
    loop = asyncio.get_running_loop()
    wake_ups: list[float] = []
    await counter.add_listener(CHANNEL, lambda *_: wake_ups.append(loop.time()))
    try:
        async with MemoryService.open(quiet) as svc:
            writes = 0
            started = loop.time()

            async def writer() -> None:
                nonlocal writes
                while loop.time() - started < 1.0:
                    await svc.memories.add(scope, f"burst {uuid.uuid4().hex}")
                    writes += 1

            await asyncio.gather(*(writer() for _ in range(8)))
            elapsed = loop.time() - started
            await asyncio.sleep(0.2)  # the burst's own wake-ups arrive
            during_burst = len(wake_ups)

            async def until_seen(memory_id: uuid.UUID) -> None:
                async with contextlib.aclosing(svc.changes(since="now")) as feed:
                    async for change in feed:
                        if change.memory_id == memory_id:
                            return

            last_id = uuid.uuid4()
            consumer = asyncio.create_task(asyncio.wait_for(until_seen(last_id), 30))
            await asyncio.sleep(0.2)  # let the consumer reach its wait
            await svc.memories.add(scope, "the last write", id=last_id)
            await consumer
    finally:
        await counter.close()
    assert writes > 100
    assert 1 <= during_burst <= elapsed / NOTIFY_INTERVAL_S + 5
