"""Erasure: nothing of the erased scope remains anywhere; nothing of another scope goes.

"Anywhere" is checked by scanning every text, JSON, array and bytea column of
every table and view of the schema, found through ``pg_catalog`` (so tables
added later are covered without touching this test), for a marker only the
erased scope ever held.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import textwrap
import uuid
from datetime import timedelta
from typing import Any

import asyncpg
import numpy as np
import pytest

from memsvc import ErasureReceipt, MemoryService, Scope, Settings, TaskState, ValidationError
from memsvc.core.errors import RedisUnavailableError
from memsvc.testing.redis import RedisServer
from memsvc.transfer.trailer import LineSink
from memsvc.working.keys import parse_key, tenant_key_pattern
from tests.lock_waits import kill_when_it_waits_for_a_lock
from tests.reliability.test_pgbouncer import bouncer_service  # noqa: F401

pytestmark = pytest.mark.timeout(300)

TENANT = "acme"
TARGET = Scope(TENANT, "bridge", "planner")
TARGET_SESSION = TARGET.with_session("s-1")
SIBLING = Scope(TENANT, "bridge", "critic", "s-1")  # same session id, another agent
PARENT = Scope(TENANT, "bridge")
OTHER_TENANT = Scope("globex", "bridge", "planner", "s-1")  # the same ids, another tenant
SHARED = "the user prefers metric units"  # held inside and outside the erased scope

# Every column type that can hold text: scanned as text (bytea as its bytes).
SCANNED_TYPES = ("text", "varchar", "bpchar", "json", "jsonb", "_text", "_varchar", "bytea")


def marker() -> str:
    return f"MARKER-{uuid.uuid4().hex}"


async def scan(
    database: str | asyncpg.Pool, needle: str, schema: str = "memsvc"
) -> dict[str, int]:
    """Rows containing ``needle`` per ``relation.column``, over every relation of the schema.

    Connects as the DSN's (or pool's) role, the suite's owner role, which
    row-level security does not bind here, so every tenant's rows are read.
    """
    if isinstance(database, str):
        conn = await asyncpg.connect(database)
        try:
            return await _scan(conn, needle, schema)
        finally:
            await conn.close()
    async with database.acquire() as pooled:
        return await _scan(pooled, needle, schema)


async def _scan(conn: Any, needle: str, schema: str) -> dict[str, int]:
    columns = await conn.fetch(
        """
        SELECT c.relname, a.attname, t.typname
        FROM pg_attribute AS a
        JOIN pg_class AS c ON c.oid = a.attrelid
        JOIN pg_namespace AS n ON n.oid = c.relnamespace
        JOIN pg_type AS t ON t.oid = a.atttypid
        WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm')
          AND a.attnum > 0 AND NOT a.attisdropped AND t.typname = ANY($2::text[])
        """,
        schema,
        list(SCANNED_TYPES),
    )
    assert {r["relname"] for r in columns} >= {
        "memories", "memory_events", "assemblies", "session_checkpoints",
        "langgraph_store_items", "recent_activity",
    }
    found: dict[str, int] = {}
    for column in columns:
        name = '"' + column["attname"].replace('"', '""') + '"'
        relation = f'{schema}."{column["relname"]}"'
        if column["typname"] == "bytea":
            condition = f"position(convert_to($1, 'UTF8') in {name}) > 0"
        else:
            condition = f"strpos({name}::text, $1) > 0"
        count = await conn.fetchval(
            f"SELECT count(*) FROM {relation} WHERE {condition}", needle
        )
        if count:
            found[f"{column['relname']}.{column['attname']}"] = count
    return found


def vector(seed: int) -> np.ndarray[Any, Any]:
    values = np.random.default_rng(seed).standard_normal(384).astype(np.float32)
    result: np.ndarray[Any, Any] = values / np.linalg.norm(values)
    return result


async def populate(svc: MemoryService, secret: str) -> dict[str, Any]:
    """Memories, history, assemblies, checkpoints and working memory in and around TARGET."""
    m = svc.memories
    kept = {
        "sibling": await m.add(SIBLING, SHARED, embedding=vector(1)),
        "parent": await m.add(PARENT, SHARED, embedding=vector(2)),
        "other_tenant": await m.add(OTHER_TENANT, SHARED, embedding=vector(3)),
        "parent_own": await m.add(PARENT, "parent only", embedding=vector(4)),
    }
    updated = await m.add(TARGET_SESSION, f"{secret} first words", embedding=vector(5))
    await m.update(updated.id, content=f"{secret} second words", metadata={"note": secret})
    deleted = await m.add(TARGET, f"{secret} deleted words", embedding=vector(6))
    await m.delete(deleted.id)
    shared_inside = await m.add(TARGET_SESSION, SHARED, embedding=vector(7))
    keyed = await m.put(TARGET.with_session("s-2"), "profile", f"{secret} keyed")
    # A parent assembly holding erased and surviving memories: it survives, recomputed.
    parent_assembly = await svc.assemblies.create(
        PARENT, "mixed", memory_ids=[kept["parent"].id, updated.id, shared_inside.id]
    )
    target_assembly = await svc.assemblies.create(
        TARGET, f"group {secret}", description=secret, memory_ids=[updated.id, kept["parent"].id]
    )
    target_wm = svc.working(TARGET_SESSION)
    await target_wm.set("draft", {"text": secret})
    await target_wm.append_scratchpad(secret)
    await target_wm.create_checkpoint(f"before {secret}")
    sibling_wm = svc.working(SIBLING)
    await sibling_wm.set("draft", {"text": SHARED})
    await sibling_wm.create_checkpoint("sibling checkpoint")
    other_wm = svc.working(OTHER_TENANT)
    await other_wm.set("draft", {"text": SHARED})
    return {
        "kept": kept,
        "erased_ids": [updated.id, deleted.id, shared_inside.id, keyed.id],
        "parent_assembly": parent_assembly,
        "target_assembly": target_assembly,
    }


async def assert_nothing_of_target_left(svc: MemoryService, dsn: str, secret: str) -> None:
    assert await scan(dsn, secret) == {}
    assert await svc.memories.count(TARGET, include="descendants") == 0
    assert await svc.assemblies.list(TARGET, include="descendants") == []
    assert await svc.checkpoints.list(TARGET_SESSION) == []
    wm = svc.working(TARGET_SESSION)
    assert await wm.get("draft") is None
    assert await wm.get_scratchpad() == []


async def test_erase_leaves_nothing_of_the_scope_and_everything_of_the_others(
    service: MemoryService, settings: Settings
) -> None:
    secret = marker()
    setup = await populate(service, secret)
    dsn = settings.database_url
    assert dsn is not None
    # The scan can see what erasure must remove: every place the secret was put.
    before = await scan(dsn, secret)
    assert {
        "memories.content", "memories.metadata", "memory_events.prior", "assemblies.name",
        "session_checkpoints.data", "session_checkpoints.description",
        "recent_activity.content_preview",
    } <= set(before)

    receipt = await service.erase(TARGET)

    assert isinstance(receipt, ErasureReceipt)
    assert receipt.verified, receipt.remaining
    assert receipt.remaining == {}
    assert receipt.removed["memories"] == 3
    assert receipt.removed["tombstones"] == 4  # three live memories and the deleted one
    assert receipt.removed["assemblies"] == 1
    assert receipt.removed["session_checkpoints"] == 1
    assert receipt.removed["working_sessions"] == 1
    assert receipt.finished is not None and receipt.started <= receipt.finished
    assert not receipt.langgraph
    await assert_nothing_of_target_left(service, dsn, secret)

    # Each erased memory's history is one content-free tombstone.
    for memory_id in setup["erased_ids"]:
        events = await service.memories.history(memory_id)
        assert [(e.kind, e.prior) for e in events] == [("erased", None)]

    # Siblings, the parent and the other tenant keep everything, the shared text included.
    for memory in setup["kept"].values():
        assert (await service.memories.get(memory.id)).content == memory.content
    assert (await scan(dsn, SHARED))["memories.content"] == 3
    assert await service.working(SIBLING).get("draft") == {"text": SHARED}
    assert len(await service.checkpoints.list(SIBLING)) == 1
    assert await service.working(OTHER_TENANT).get("draft") == {"text": SHARED}
    # The parent assembly lost its erased members and was recomputed from the survivor.
    survivor = await service.assemblies.get(setup["parent_assembly"].id)
    assert survivor.member_count == 1
    assert survivor.centroid is not None
    np.testing.assert_allclose(survivor.centroid, vector(2), atol=1e-6)

    # The doctor sees tombstones as history, not as memories removed behind its back.
    report = await service.maintenance.doctor()
    assert report.ok, report

    # Running it again finds nothing to do and verifies again (idempotent).
    again = await service.erase(TARGET)
    assert again.verified
    assert all(count == 0 for count in again.removed.values())


async def test_erase_leaves_one_deleted_event_per_assembly_and_checkpoint_in_the_feed(
    service: MemoryService, settings: Settings
) -> None:
    """The feed's ledger of assemblies and checkpoints keeps, like a memory's
    tombstone, only the content-free event saying each erased one is gone."""
    secret = marker()
    setup = await populate(service, secret)
    target_assembly = setup["target_assembly"]
    await service.assemblies.update(target_assembly.id, description=f"{secret} again")
    sibling_events_before = await ledger(settings, SIBLING)

    receipt = await service.erase(TARGET)

    assert receipt.verified, receipt.remaining
    assert receipt.removed["entity_events"] >= 3  # created and updated assembly, checkpoint
    left = await ledger(settings, TARGET)
    assert sorted(left) == [("assembly", "deleted"), ("checkpoint", "deleted")]
    assert await ledger(settings, SIBLING) == sibling_events_before


async def ledger(settings: Settings, scope: Scope) -> list[tuple[str, str]]:
    """The (entity, kind) of the feed's assembly and checkpoint events under ``scope``."""
    assert settings.database_url is not None
    conn = await asyncpg.connect(settings.database_url)
    try:
        rows = await conn.fetch(
            f"SELECT entity, kind FROM {settings.db_schema}.entity_events "
            "WHERE tenant_id = $1 AND project_id = $2 AND ($3::text IS NULL OR agent_id = $3) "
            "ORDER BY event_id",
            scope.tenant,
            scope.project,
            scope.agent,
        )
    finally:
        await conn.close()
    return [(r["entity"], r["kind"]) for r in rows]


async def test_delete_scope_keeps_content_in_history_and_the_scan_sees_it(
    service: MemoryService, settings: Settings
) -> None:
    """The control: delete is not erase, and the scan that proves erasure would catch it."""
    secret = marker()
    await service.memories.add(TARGET_SESSION, f"{secret} words")
    assert await service.memories.delete_scope(TARGET) == 1
    assert settings.database_url is not None
    left = await scan(settings.database_url, secret)
    assert left.get("memory_events.prior") == 1
    assert left.get("recent_activity.content_preview") == 1
    receipt = await service.erase(TARGET)
    assert receipt.verified and receipt.removed["tombstones"] == 1
    assert await scan(settings.database_url, secret) == {}


async def test_exact_erases_only_that_scope(service: MemoryService, settings: Settings) -> None:
    secret = marker()
    inside = await service.memories.add(TARGET, f"{secret} agent level")
    below = await service.memories.add(TARGET_SESSION, f"{secret} session level")
    receipt = await service.erase(TARGET, include="exact")
    assert receipt.verified and receipt.removed["memories"] == 1
    assert (await service.memories.get(below.id)).content.endswith("session level")
    assert [e.kind for e in await service.memories.history(inside.id)] == ["erased"]


async def test_erase_refuses_bad_arguments_and_writes_nothing(service: MemoryService) -> None:
    memory = await service.memories.add(TARGET_SESSION, "stays")
    with pytest.raises(ValidationError) as include:
        await service.erase(TARGET, include="ancestors")  # would erase the parents
    assert include.value.field == "include"
    with pytest.raises(ValidationError) as batch:
        await service.erase(TARGET, batch_size=0)
    assert batch.value.field == "batch_size"
    with pytest.raises(ValidationError):
        await service.erase("acme")  # type: ignore[arg-type]
    assert (await service.memories.get(memory.id)).content == "stays"


async def test_erase_of_a_whole_tenant_removes_its_langgraph_rows(
    service: MemoryService, settings: Settings
) -> None:
    from langgraph.checkpoint.conformance.test_utils import (
        generate_checkpoint,
        generate_config,
        generate_metadata,
    )

    from memsvc.integrations.langgraph import MemsvcSaver, MemsvcStore

    secret = marker()
    for tenant in (TENANT, "globex"):
        store = MemsvcStore(service, tenant=tenant)
        await store.aput(("facts", "u1"), "k1", {"text": f"{secret} {tenant}"})
        saver = MemsvcSaver(service, tenant=tenant)
        versions = {"notes": saver.get_next_version(None, None)}
        checkpoint = generate_checkpoint(
            channel_values={"notes": f"{secret} {tenant}"}, channel_versions=versions
        )
        config = await saver.aput(generate_config("t1"), checkpoint, generate_metadata(), versions)
        await saver.aput_writes(config, [("notes", f"{secret} {tenant} write")], "task-1")
    assert settings.database_url is not None

    narrower = await service.erase(TARGET)  # LangGraph rows carry only the tenant: kept
    assert not narrower.langgraph
    assert "langgraph_store_items.value" in await scan(settings.database_url, secret)

    receipt = await service.erase(Scope(TENANT))
    assert receipt.verified and receipt.langgraph
    assert receipt.removed["langgraph_store_items"] == 1
    assert receipt.removed["langgraph_checkpoints"] == 1
    assert receipt.removed["langgraph_checkpoint_writes"] == 1
    assert await scan(settings.database_url, f"{secret} {TENANT}") == {}
    # The other tenant's LangGraph rows are all there.
    kept = await scan(settings.database_url, f"{secret} globex")
    assert {"langgraph_store_items.value", "langgraph_checkpoint_blobs.blob",
            "langgraph_checkpoint_writes.value"} <= set(kept)


async def test_erase_clears_redis_working_memory_of_every_session_under_the_scope(
    settings: Settings, redis_url: str
) -> None:
    tenant = f"t-{uuid.uuid4().hex[:8]}"  # the Redis server is shared by the suite
    inside = [Scope(tenant, "p*", "a", "s1"), Scope(tenant, "p*", None, "s2")]
    outside = [
        Scope(tenant, "p1", "a", "s1"),  # "p*" must match literally, never as a glob
        Scope(tenant, "p", "a", "s1"),
        Scope(tenant, None, None, "s1"),
        Scope(f"{tenant}x", "p*", "a", "s1"),
    ]
    redis_settings = settings.model_copy(update={"redis_url": redis_url})
    async with MemoryService.open(redis_settings) as svc:
        assert svc.working_store.backend == "redis"
        for scope in inside + outside:
            wm = svc.working(scope)
            await wm.set("k", {"v": 1})
            await wm.set_task_state(TaskState(task_id="t1"))
            await wm.append_scratchpad("note")
        receipt = await svc.erase(Scope(tenant, "p*"))
        assert receipt.removed["working_sessions"] == 2
        for scope in inside:
            wm = svc.working(scope)
            assert await wm.list_keys() == [] and await wm.get_scratchpad() == []
            assert await wm.get_task_state() is None
        for scope in outside:
            assert await svc.working(scope).get("k") == {"v": 1}
        client: Any = svc.working_store.client  # type: ignore[attr-defined]
        left = {parse_key(key)[0] async for key in client.scan_iter(match=f"*{tenant}*")}
        assert left == set(outside)


# --------------------------------------------------------------- crash and races

ERASER = textwrap.dedent(
    """
    import asyncio, sys
    from memsvc import MemoryService, Scope
    from memsvc.testing.postgres import settings_for_tests

    async def main():
        async with MemoryService.open(settings_for_tests(sys.argv[1])) as svc:
            await svc.erase(Scope("acme", "bridge", "planner"), batch_size=2)

    asyncio.run(main())
    """
)


# A backend of this test's database waiting for a lock (the eraser, on the held assembly).


async def memory_state(svc: MemoryService, memory_id: uuid.UUID) -> str:
    """``erased`` (no row, only a tombstone) or ``kept`` (row and its full history)."""
    history = [(e.kind, e.prior is None) for e in await svc.memories.history(memory_id)]
    found = await svc.memories.get_many([memory_id])
    if not found and history == [("erased", True)]:
        return "erased"
    if found and history and history[0] == ("created", True) and "erased" not in {
        kind for kind, _ in history
    } and len(history) == found[0].version:
        return "kept"
    return f"half: row={bool(found)} history={history}"


async def test_a_crashed_erasure_leaves_no_half_memory_and_a_rerun_finishes_it(
    service: MemoryService, settings: Settings
) -> None:
    """SIGKILL the eraser inside a batch's transaction (rows locked, nothing deleted yet)."""
    secret = marker()
    for i in range(12):
        memory = await service.memories.add(TARGET_SESSION, f"{secret} {i}", embedding=vector(i))
        await service.memories.update(memory.id, content=f"{secret} {i} revised")
    dsn = settings.database_url
    assert dsn is not None
    admin = await asyncpg.connect(dsn)
    # Outside the blocker's transaction: activity statistics are read once per transaction.
    watcher = await asyncpg.connect(dsn)
    try:
        ids = [r["id"] for r in await admin.fetch(
            "SELECT id FROM memsvc.memories ORDER BY tenant_id, id"
        )]
        # The fourth batch (memories 7 and 8) waits for this assembly, mid-transaction.
        held = await service.assemblies.create(PARENT, "held", memory_ids=[ids[6]])
        blocker = admin.transaction()
        await blocker.start()
        await admin.execute("SELECT 1 FROM memsvc.assemblies WHERE id = $1 FOR UPDATE", held.id)
        await kill_when_it_waits_for_a_lock(watcher, ERASER, dsn, what="the eraser")
        await blocker.rollback()
    finally:
        await admin.close()
        await watcher.close()

    states = [await memory_state(service, memory_id) for memory_id in ids]
    assert states == ["erased"] * 6 + ["kept"] * 6  # three batches committed, the fourth lost

    receipt = await service.erase(TARGET)
    assert receipt.verified
    assert receipt.removed["memories"] == 6
    assert [await memory_state(service, memory_id) for memory_id in ids] == ["erased"] * 12
    assert (await service.assemblies.get(held.id)).member_count == 0
    assert await scan(dsn, secret) == {}


async def test_writes_racing_an_erasure_are_erased_whole_or_kept_whole(
    service: MemoryService, settings: Settings
) -> None:
    secret = marker()
    before = [
        (await service.memories.add(TARGET_SESSION, f"{secret} before {i}")).id
        for i in range(30)
    ]
    during: list[uuid.UUID] = []
    stop = asyncio.Event()

    async def writer(n: int) -> None:
        i = 0
        while not stop.is_set():
            memory = await service.memories.add(
                TARGET.with_session(f"s-{n}"), f"{secret} during {n} {i}"
            )
            during.append(memory.id)
            i += 1
            await asyncio.sleep(0)

    writers = [asyncio.create_task(writer(n)) for n in range(3)]
    while len(during) < 5:
        await asyncio.sleep(0.001)
    receipt = await service.erase(TARGET, batch_size=4)
    stop.set()
    await asyncio.gather(*writers)

    assert len(during) > 5
    # Committed before the erasure began: gone when it returned.
    assert {await memory_state(service, i) for i in before} == {"erased"}
    # Committed during it: erased whole or kept whole, never half.
    states = [await memory_state(service, i) for i in during]
    assert set(states) <= {"erased", "kept"}, states
    # What was kept is visible in the receipt, counted as written during the erasure.
    kept = states.count("kept")
    assert receipt.written_during.get("memories", 0) <= kept
    if not receipt.verified:
        assert receipt.remaining.get("memories", 0) > 0 and kept > 0
    # Once the writers stopped, a second run leaves nothing.
    final = await service.erase(TARGET)
    assert final.verified
    assert settings.database_url is not None
    assert await scan(settings.database_url, secret) == {}


async def test_two_erasers_of_one_scope_leave_one_tombstone_per_memory(
    service: MemoryService, settings: Settings
) -> None:
    secret = marker()
    ids = []
    for i in range(20):
        memory = await service.memories.add(TARGET_SESSION, f"{secret} {i}")
        ids.append(memory.id)
        if i % 2:
            await service.memories.delete(memory.id)  # half of them only in history
    first, second = await asyncio.gather(
        service.erase(TARGET, batch_size=3), service.erase(TARGET, batch_size=5)
    )
    assert first.removed.get("tombstones", 0) + second.removed.get("tombstones", 0) == 20
    for memory_id in ids:
        assert [e.kind for e in await service.memories.history(memory_id)] == ["erased"]
    assert settings.database_url is not None
    assert await scan(settings.database_url, secret) == {}


async def test_erase_through_pgbouncer(
    bouncer_service: MemoryService,  # noqa: F811
) -> None:
    secret = marker()
    setup = await populate(bouncer_service, secret)
    receipt = await bouncer_service.erase(TARGET, batch_size=2, vacuum=True)
    assert receipt.verified, receipt.remaining
    assert receipt.removed["memories"] == 3
    assert set(receipt.vacuum.values()) == {"vacuumed"}
    assert await scan(bouncer_service.pool, secret) == {}
    for memory in setup["kept"].values():
        assert (await bouncer_service.memories.get(memory.id)).content == memory.content


async def test_the_sync_client_erases_too(settings: Settings) -> None:
    from memsvc.sync import SyncMemoryService

    def run() -> None:
        with SyncMemoryService.open(settings) as svc:
            memory = svc.memories.add(TARGET_SESSION, "erase me from a thread")
            receipt = svc.erase(TARGET)
            assert receipt.verified and receipt.removed["memories"] == 1
            assert [e.kind for e in svc.memories.history(memory.id)] == ["erased"]

    await asyncio.to_thread(run)


# ------------------------------------------------------------- edges (issue 26)


async def owner_execute(settings: Settings, sql: str, *args: Any) -> None:
    """Run ``sql`` as the suite's owner role (changes no API allows: the edges to prove)."""
    assert settings.database_url is not None
    conn = await asyncpg.connect(settings.database_url)
    try:
        await conn.execute(sql, *args)
    finally:
        await conn.close()


def without_views(found: dict[str, int]) -> dict[str, int]:
    """A scan's findings in tables (a view shows some of them, depending on the others)."""
    return {name: count for name, count in found.items() if not name.startswith("recent_")}


async def history_kinds(svc: MemoryService, memory_id: uuid.UUID) -> list[str]:
    return [e.kind for e in await svc.memories.history(memory_id)]


async def test_erasing_the_first_scope_of_a_reused_id_removes_its_history_and_keeps_the_new_one(
    service: MemoryService, settings: Settings
) -> None:
    """add(A, id=X), delete(X), add(B, id=X): erase(A) finds A's history and verifies."""
    first, second = marker(), marker()
    memory = await service.memories.add(TARGET_SESSION, f"{first} said in A")
    await service.memories.update(memory.id, content=f"{first} revised in A")
    await service.memories.delete(memory.id)
    reused = await service.memories.add(SIBLING, f"{second} said in B", id=memory.id)
    assert settings.database_url is not None

    receipt = await service.erase(TARGET)

    assert receipt.verified, receipt.remaining
    assert receipt.removed["tombstones"] == 1
    assert await scan(settings.database_url, first) == {}
    # B's memory and its audit trail are untouched.
    assert (await service.memories.get(reused.id)).content == f"{second} said in B"
    assert await history_kinds(service, memory.id) == ["created", "erased"]
    again = await service.erase(TARGET)
    assert again.verified and not any(again.removed.values())


async def test_erasing_the_scope_that_reused_an_id_keeps_the_first_scopes_history(
    service: MemoryService, settings: Settings
) -> None:
    """add(A, id=X), delete(X), add(B, id=X): erase(B) leaves A's audit trail whole."""
    first, second = marker(), marker()
    memory = await service.memories.add(TARGET_SESSION, f"{first} said in A")
    await service.memories.delete(memory.id)
    await service.memories.add(SIBLING, f"{second} said in B", id=memory.id)
    assert settings.database_url is not None
    trail = await scan(settings.database_url, first)
    assert trail.get("memory_events.prior") == 1

    receipt = await service.erase(SIBLING)

    assert receipt.verified, receipt.remaining
    assert await scan(settings.database_url, second) == {}
    assert without_views(await scan(settings.database_url, first)) == without_views(trail)
    kinds = await history_kinds(service, memory.id)
    assert kinds.count("created") == 1 and kinds.count("deleted") == 1  # A's, untouched
    assert kinds.count("erased") == 1  # B's tombstone


async def test_a_sibling_holding_the_same_text_is_neither_accused_nor_touched(
    service: MemoryService, settings: Settings
) -> None:
    """A sibling's checkpoint and deleted memory say what the erased memory said."""
    secret = marker()
    text = f"{secret} the same words"
    await service.memories.add(TARGET_SESSION, text)
    said_too = await service.memories.add(SIBLING, text)
    await service.memories.delete(said_too.id)
    await service.checkpoints.create(SIBLING, {"notes": [text]}, description=text)
    assert settings.database_url is not None
    sibling_holds = await scan(settings.database_url, secret)

    receipt = await service.erase(TARGET)

    assert receipt.verified, receipt.remaining
    assert receipt.remaining == {}
    assert without_views(await scan(settings.database_url, secret)) == {
        name: count for name, count in without_views(sibling_holds).items()
        if name != "memories.content"
    }
    assert (await service.erase(TARGET)).verified  # and so does every rerun


async def test_rows_dated_in_the_future_are_erased_all_the_same(
    service: MemoryService, settings: Settings
) -> None:
    """The cut is by commit: a created_at from a skewed clock or an edited file changes nothing."""
    secret = marker()
    memory = await service.memories.add(TARGET_SESSION, f"{secret} dated 2999")
    assembly = await service.assemblies.create(TARGET, f"{secret} group")
    checkpoint = await service.checkpoints.create(TARGET_SESSION, {"note": secret})
    for table, row_id in (
        ("memories", memory.id),
        ("assemblies", assembly.id),
        ("session_checkpoints", checkpoint.id),
    ):
        await owner_execute(
            settings,
            f"UPDATE memsvc.{table} SET created_at = '2999-01-01T00:00:00Z' WHERE id = $1",
            row_id,
        )

    receipt = await service.erase(TARGET)

    assert receipt.verified, receipt.remaining
    assert receipt.written_during == {}
    assert (receipt.removed["memories"], receipt.removed["assemblies"],
            receipt.removed["session_checkpoints"]) == (1, 1, 1)
    assert settings.database_url is not None
    assert await scan(settings.database_url, secret) == {}


async def test_an_import_dated_in_the_future_is_clamped_said_so_and_erasable(
    service: MemoryService, settings: Settings, tmp_path: Any
) -> None:
    secret = marker()
    line = {
        "type": "memory", "tenant": TENANT, "project": "bridge", "agent": "planner",
        "session": "s-1", "content": f"{secret} imported", "created_at": "2999-01-01T00:00:00Z",
        "id": str(uuid.uuid4()),
    }
    path = tmp_path / "future.jsonl"
    with path.open("w", encoding="utf-8") as out:  # a complete file: the line and its trailer
        sink = LineSink(out)
        sink.write_lines([json.dumps(line)])
        sink.write_trailer()

    report = await service.maintenance.import_file(path)

    assert report.memories.inserted == 1
    assert [w.reason for w in report.warnings] == [
        "created_at 2999-01-01T00:00:00+00:00 is more than import_clock_skew_s (300s) "
        "in the future: stored as the time of the import"
    ]
    stored = await service.memories.get(line["id"])
    assert stored.created_at.year < 2999
    receipt = await service.erase(TARGET)
    assert receipt.verified and receipt.removed["memories"] == 1


async def test_tombstones_and_the_ledger_keep_no_id_below_the_erased_scope(
    service: MemoryService, settings: Settings
) -> None:
    """Agent and session ids are often user ids: after erasing a project none of them is left."""
    ids = marker()
    agent = Scope(TENANT, "bridge", f"agent-{ids}")
    session = agent.with_session(f"session-{ids}")
    memory = await service.memories.add(session, "words")
    deleted = await service.memories.add(session, "deleted words")
    await service.memories.delete(deleted.id)
    dropped = await service.assemblies.create(agent, "dropped")
    await service.assemblies.delete(dropped.id)  # its 'deleted' ledger event names the agent
    await service.checkpoints.create(session, {"step": 1})
    # An erasure of the session alone keeps the ids it was given...
    first_session = agent.with_session(f"first-{ids}")
    earlier = await service.memories.add(first_session, "erased first, by session")
    assert (await service.erase(first_session)).verified
    assert [(e.kind, e.prior) for e in await service.memories.history(earlier.id)] == [
        ("erased", None)
    ]
    await service.assemblies.create(agent, "group", memory_ids=[memory.id])
    assert settings.database_url is not None
    assert {"memory_events.agent_id", "entity_events.session_id"} <= set(
        await scan(settings.database_url, ids)
    )

    # ... the erasure of the project renames them too.
    receipt = await service.erase(Scope(TENANT, "bridge"))

    assert receipt.verified, receipt.remaining
    assert await scan(settings.database_url, ids) == {}
    assert await history_kinds(service, memory.id) == ["erased"]
    assert await history_kinds(service, deleted.id) == ["erased"]
    assert receipt.removed["pseudonymized"] >= 2  # the first erasure's tombstones, 'deleted'
    # The receipt says what identifies the erased scope still, and why.
    assert {"tenant_id", "project_id", "agent_id", "session_id"} <= set(receipt.kept)
    assert "pseudonym" in receipt.kept["agent_id"]
    assert "named by the caller" in receipt.kept["project_id"]


async def test_the_receipt_finds_erased_text_copied_into_tables_outside_the_scopes(
    service: MemoryService, settings: Settings
) -> None:
    """A table added later (no code change), substrings, metadata values, names,
    checkpoint data, arrays and bytea; never a sibling's rows."""
    secret = marker()
    content = f"{secret} the content"
    meta_value = f"{secret}-meta"
    description = f"{secret} assembly description"
    checkpoint_text = f"{secret} checkpoint words"
    memory = await service.memories.add(TARGET_SESSION, content, metadata={"tag": meta_value})
    await service.assemblies.create(TARGET, "named", description=description,
                                    memory_ids=[memory.id])
    await service.checkpoints.create(TARGET_SESSION, {"deep": {"list": [checkpoint_text]}})
    await service.memories.add(SIBLING, f"sibling quotes: {content}")  # a sibling's own row
    await owner_execute(settings, """
        CREATE TABLE memsvc.app_notes (tenant_id text, note text, tags text[], doc jsonb,
                                       raw bytea)""")
    await owner_execute(
        settings,
        "INSERT INTO memsvc.app_notes VALUES ($1, $2, $3, $4::jsonb, $5)",
        TENANT,
        f"summary: {content}, and more",
        ["x", meta_value],
        json.dumps({"k": {"v": description}}),
        b"\x00\x01" + checkpoint_text.encode() + b"\x02",
    )
    await owner_execute(
        settings, "INSERT INTO memsvc.app_notes VALUES ('globex', $1)", content
    )  # another tenant's row: theirs

    receipt = await service.erase(TARGET)

    assert not receipt.verified
    assert receipt.remaining == {
        "app_notes.note": 1, "app_notes.tags": 1, "app_notes.doc": 1, "app_notes.raw": 1
    }
    checked = "\n".join(receipt.checked)
    assert "app_notes" in checked and "substring" in checked
    await owner_execute(settings, "DELETE FROM memsvc.app_notes WHERE tenant_id = $1", TENANT)
    assert (await service.erase(TARGET)).verified


async def redis_keys_of(url: str, tenant: str) -> list[str]:
    import redis.asyncio as redis_asyncio

    client = redis_asyncio.Redis.from_url(url, decode_responses=True)
    try:
        return [key async for key in client.scan_iter(match=tenant_key_pattern(tenant))]
    finally:
        await client.aclose()


async def test_erase_never_runs_on_the_fallback_store_it_fails_naming_redis(
    settings: Settings, redis_server_factory: Any
) -> None:
    """Redis briefly down when the service opened: erase fails, typed, before writing
    anything; once Redis answers again the same service erases there too."""
    server: RedisServer = redis_server_factory()
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    session = Scope(tenant, "bridge", "planner", "s-1")
    redis_settings = settings.model_copy(
        update={"redis_url": server.url, "redis_timeout_s": 0.2}
    )
    async with MemoryService.open(redis_settings) as svc:
        await svc.working(session).set("draft", {"text": "in redis"})
        memory = await svc.memories.add(session, "stays until the erasure runs")
    os.kill(server.pid, signal.SIGSTOP)  # alive, holding the session, but silent
    try:
        async with MemoryService.open(redis_settings) as svc:
            assert svc.working_store.using_fallback
            with pytest.raises(RedisUnavailableError) as caught:
                await svc.erase(Scope(tenant))
            assert "Redis at redis://" in str(caught.value)
            assert (await svc.memories.get(memory.id)).content == "stays until the erasure runs"
            assert await svc.memories.history(memory.id)  # no tombstone either

            os.kill(server.pid, signal.SIGCONT)  # back; the service still holds its fallback
            receipt = await svc.erase(Scope(tenant))
            assert svc.working_store.using_fallback
            assert receipt.verified, receipt.remaining
            assert receipt.removed["working_sessions"] == 1
            assert receipt.working_memory.startswith("redis at redis://")
    finally:
        os.kill(server.pid, signal.SIGCONT)
    assert await redis_keys_of(server.url, tenant) == []


class WriteWhenVerifying:
    """A progress reporter that writes working memory as the verification starts."""

    def __init__(self, svc: MemoryService, scope: Scope) -> None:
        self.svc, self.scope = svc, scope
        self.task: asyncio.Task[None] | None = None

    def start(self, description: str, *, total: int | None = None, unit: str = "rows") -> None:
        if description == "verifying":
            self.task = asyncio.get_running_loop().create_task(
                self.svc.working(self.scope).set("late", "written after the sessions went")
            )

    def advance(self, amount: int = 1) -> None:
        pass

    def done(self) -> None:
        pass


async def test_the_receipt_checks_working_memory_in_redis(
    settings: Settings, redis_url: str
) -> None:
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    session = Scope(tenant, "bridge", "planner", "s-1")
    async with MemoryService.open(settings.model_copy(update={"redis_url": redis_url})) as svc:
        await svc.working(session).set("draft", 1)
        writer = WriteWhenVerifying(svc, session)
        receipt = await svc.erase(Scope(tenant, "bridge"), progress=writer)
        assert writer.task is not None and writer.task.done()  # before Redis was checked
        assert not receipt.verified
        assert set(receipt.remaining) == {"working_memory_keys"}
        assert (await svc.erase(Scope(tenant, "bridge"))).verified


RELATION_FILES = """
SELECT c.oid::regclass::text AS relation, pg_relation_filepath(c.oid) AS path
FROM pg_class AS c
WHERE c.relfilenode <> 0 AND c.relkind IN ('r', 'i', 't', 'm') AND (
    c.relnamespace = 'memsvc'::regnamespace
    OR c.oid IN (SELECT reltoastrelid FROM pg_class WHERE relnamespace = 'memsvc'::regnamespace)
    OR c.oid IN (SELECT i.indexrelid FROM pg_index AS i JOIN pg_class AS t ON t.oid = i.indrelid
                 WHERE t.oid IN (SELECT reltoastrelid FROM pg_class
                                 WHERE relnamespace = 'memsvc'::regnamespace)))"""


async def files_holding(settings: Settings, needle: str) -> list[str]:
    """memsvc's relations (tables, TOAST, indexes) whose data files hold ``needle``'s bytes."""
    assert settings.database_url is not None
    conn = await asyncpg.connect(settings.database_url)
    try:
        if not await conn.fetchval("SELECT rolsuper FROM pg_roles WHERE rolname = current_user"):
            pytest.skip("reading table files needs a superuser test database")
        await conn.execute("CHECKPOINT")  # every page on disk
        found = []
        for row in await conn.fetch(RELATION_FILES):
            data = await conn.fetchval("SELECT pg_read_binary_file($1)", row["path"])
            if needle.encode() in data:
                found.append(row["relation"])
        return sorted(found)
    finally:
        await conn.close()


async def test_vacuum_full_leaves_no_erased_bytes_in_the_table_files(
    service: MemoryService, settings: Settings
) -> None:
    secret = marker()
    for i in range(3):
        memory = await service.memories.add(TARGET_SESSION, f"{secret} {i} words")
        await service.memories.update(memory.id, content=f"{secret} {i} revised")
    await service.checkpoints.create(TARGET_SESSION, {"note": secret})
    await service.memories.add(SIBLING, "a sibling keeps the tables in use")

    receipt = await service.erase(TARGET)

    assert receipt.verified and receipt.vacuum == {}
    # The control: deleted rows stay in the files until they are vacuumed.
    assert "memsvc.memories" in await files_holding(settings, secret)

    receipt = await service.erase(TARGET, vacuum="full")

    assert receipt.verified
    assert receipt.vacuum["memories"] == "vacuumed (full)"
    assert await files_holding(settings, secret) == []


async def test_plain_vacuum_is_reported_table_by_table(service: MemoryService) -> None:
    await service.memories.add(TARGET_SESSION, "erase me")
    receipt = await service.erase(TARGET, vacuum=True)
    assert receipt.verified
    assert receipt.vacuum == {
        table: "vacuumed"
        for table in ("assemblies", "assembly_members", "entity_events", "memories",
                      "memory_events", "memory_policies", "remembered_messages",
                      "session_checkpoints")
    }


async def test_erasure_memory_does_not_grow_with_the_tenant(
    service: MemoryService, settings: Settings
) -> None:
    """Sixteen times the memories, about the same client memory (the figure at 200,000
    memories: ``python -m benchmarks.erasure_memory --memories 200000``)."""
    import tracemalloc

    from benchmarks.erasure_memory import fill

    assert settings.database_url is not None
    peaks = []
    for size in (1000, 16000):
        await fill(settings.database_url, settings.db_schema, size, tag=f"size {size}")
        tracemalloc.start()
        try:
            receipt = await service.erase(Scope("bench", "p", "target"), batch_size=200)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert receipt.verified, receipt.remaining
        assert receipt.removed["tombstones"] == size
    # Holding per-memory state costs about 0.6 KiB a memory (9 MiB more here); what
    # does grow is bounded: the driver's COPY buffer (512 KiB) filling up.
    assert peaks[1] - peaks[0] < 3 * 2**20, peaks


async def test_ids_are_not_texts_a_row_outside_the_scopes_is_accused_of_holding(
    service: MemoryService,
) -> None:
    """A metadata value equal to the tenant id is in every tenant row's tenant_id:
    scope columns are ids, checked by scope, never searched for erased texts."""
    from memsvc.integrations.langgraph import MemsvcStore

    tenant = "acme-corporation"
    await service.memories.add(Scope(tenant, "p", "a", "s"), "words", metadata={"org": tenant})
    await MemsvcStore(service, tenant=tenant).aput(("facts",), "k1", {"text": "unrelated"})

    receipt = await service.erase(Scope(tenant, "p"))

    assert receipt.verified, receipt.remaining


async def test_erase_removes_the_half_life_policies_of_the_scope_and_below(
    service: MemoryService,
) -> None:
    session = Scope("acme", "p", "a", "ana-session")
    await service.memories.add(session, "Ana likes tea.")
    await service.policies.set(session, half_life=timedelta(days=3))
    await service.policies.set(Scope("acme", "p"), half_life=timedelta(days=30))
    await service.policies.set(Scope("other", "p"), half_life=timedelta(days=30))
    receipt = await service.erase(Scope("acme", "p", "a"))
    assert receipt.verified, receipt.remaining
    assert receipt.removed["memory_policies"] == 1
    assert [p.scope for p in await service.policies.list(tenant="acme")] == [Scope("acme", "p")]
    receipt = await service.erase(Scope("acme"))
    assert receipt.verified, receipt.remaining
    assert await service.policies.list(tenant="acme") == []
    assert len(await service.policies.list(tenant="other")) == 1
