"""Issue 31, item 3: assemblies and checkpoints write, and their events reach entity_events."""

from __future__ import annotations

import uuid

import asyncpg

from memsvc import MemoryService, Scope, Settings


async def entity_event_kinds(settings: Settings, entity_id: uuid.UUID) -> list[str]:
    assert settings.database_url is not None
    conn = await asyncpg.connect(settings.database_url)
    try:
        rows = await conn.fetch(
            f"SELECT kind FROM {settings.db_schema}.entity_events "
            "WHERE tenant_id = 'acme' AND entity_id = $1 ORDER BY event_id",
            entity_id,
        )
    finally:
        await conn.close()
    return [row["kind"] for row in rows]


async def test_assembly_create_update_delete_record_their_events(
    citus_service: MemoryService, citus_settings: Settings
) -> None:
    scope = Scope(tenant="acme", project="bridge")
    first = await citus_service.memories.add(scope, "the user prefers metric units")
    second = await citus_service.memories.add(scope, "the user lives in Oslo")
    assembly = await citus_service.assemblies.create(scope, "units", memory_ids=[first.id])
    grown = await citus_service.assemblies.add_members(assembly.id, [second.id], tenant="acme")
    assert grown.member_count == 2
    assert await citus_service.assemblies.delete(assembly.id, tenant="acme")
    assert await entity_event_kinds(citus_settings, assembly.id) == [
        "created",
        "updated",
        "deleted",
    ]


async def test_working_memory_checkpoint_is_stored_with_its_event(
    citus_service: MemoryService, citus_settings: Settings
) -> None:
    working = citus_service.working(Scope("acme", "bridge", "planner", "s-42"))
    await working.set("draft", {"step": 1}, ttl_seconds=600)
    checkpoint = await working.create_checkpoint("before edit")
    listed = await working.list_checkpoints()
    assert [c["id"] for c in listed] == [checkpoint]
    assert await entity_event_kinds(citus_settings, uuid.UUID(checkpoint)) == ["created"]
