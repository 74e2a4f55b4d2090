"""Issue 31, item 2: ``memories.put`` (upsert by key) works on distributed tables."""

from __future__ import annotations

from memsvc import MemoryService, Scope


async def test_put_then_put_again_then_get_by_key(citus_service: MemoryService) -> None:
    scope = Scope(tenant="acme", project="bridge", agent="planner", session="s-42")
    first = await citus_service.memories.put(scope, "units", "metric")
    assert first.version == 1
    second = await citus_service.memories.put(scope, "units", "imperial")
    assert second.id == first.id and second.version == 2
    found = await citus_service.memories.get_by_key(scope, "units")
    assert found.content == "imperial" and found.version == 2
    kinds = [event.kind for event in await citus_service.memories.history(first.id, tenant="acme")]
    assert kinds == ["created", "updated"]
