"""Issue 31, item 4: operations without a tenant (``delete(id)``, ``maintenance.gc()``).

An id alone names no tenant, so these statements run on every shard; they
lock rows (FOR UPDATE) before changing them.
"""

from __future__ import annotations

import asyncio

import pytest

from memsvc import MemoryService, NotFoundError, Scope


async def test_delete_by_id_without_tenant(citus_service: MemoryService) -> None:
    memory = await citus_service.memories.add(Scope("acme", "bridge"), "forget me")
    kept = await citus_service.memories.add(Scope("globex", "p1"), "keep me")
    assert await citus_service.memories.delete(memory.id) is True
    with pytest.raises(NotFoundError):
        await citus_service.memories.get(memory.id, tenant="acme")
    assert (await citus_service.memories.get(kept.id, tenant="globex")).content == "keep me"
    kinds = [e.kind for e in await citus_service.memories.history(memory.id, tenant="acme")]
    assert kinds == ["created", "deleted"]


async def test_gc_deletes_expired_memories_of_every_tenant(citus_service: MemoryService) -> None:
    for tenant in ("acme", "globex"):
        await citus_service.memories.add(Scope(tenant, "p"), "short lived", ttl=0.05)
        await citus_service.memories.add(Scope(tenant, "p"), "long lived")
    await asyncio.sleep(0.2)
    report = await citus_service.maintenance.gc()
    assert report.expired_deleted == 2
    for tenant in ("acme", "globex"):
        assert await citus_service.memories.count(Scope(tenant, "p")) == 1
