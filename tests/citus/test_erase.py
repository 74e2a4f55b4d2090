"""Issue 31, item 6: ``erase(Scope(tenant=...))`` erases a whole tenant and verifies it.

The tenant has live memories and a deleted one (whose history outlives its
row): erasure removes both, leaving one content-free tombstone per memory.
"""

from __future__ import annotations

from memsvc import MemoryService, Scope


async def test_erase_a_tenant_removes_its_rows_and_histories_and_keeps_the_others(
    citus_service: MemoryService,
) -> None:
    gone = Scope("globex", "p1", "a", "s")
    memories = [await citus_service.memories.add(gone, f"globex secret plan {i}") for i in range(3)]
    assert await citus_service.memories.delete(memories[0].id, tenant="globex")
    await citus_service.memories.add(Scope("acme", "bridge"), "acme keeps this")
    receipt = await citus_service.erase(Scope(tenant="globex"))
    assert receipt.verified, receipt.remaining
    assert await citus_service.memories.count(Scope("globex"), include="descendants") == 0
    assert await citus_service.memories.count(Scope("acme"), include="descendants") == 1
    for memory in memories:
        kinds = [e.kind for e in await citus_service.memories.history(memory.id, tenant="globex")]
        assert kinds == ["erased"]
