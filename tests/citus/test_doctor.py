"""Issue 31, item 5: ``maintenance.doctor()`` checks a distributed schema."""

from __future__ import annotations

from memsvc import MemoryService, Scope


async def test_doctor_finds_no_problem_in_a_healthy_distributed_schema(
    citus_service: MemoryService,
) -> None:
    scope = Scope("acme", "bridge")
    memory = await citus_service.memories.add(scope, "the user prefers metric units")
    await citus_service.memories.add(Scope("globex", "p1"), "another tenant's memory")
    await citus_service.memories.update(memory.id, tenant="acme", content="metric, always")
    report = await citus_service.maintenance.doctor()
    assert report.ok, [(c.name, c.detail) for c in report.problems]
