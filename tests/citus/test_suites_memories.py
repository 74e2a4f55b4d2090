"""The single-node tests of memories, assemblies and checkpoints, run on the cluster.

Imported here, they run with ``tests/citus/conftest.py``'s ``service`` and
``settings`` (the distributed schema, emptied per test), every one of them
but one: forty adds racing across one memory's expiry instant sometimes all
finish after it on the cluster (they wait on one another for seconds, as if
for Citus's distributed deadlock detection), so the test's premise, that
the race spans the instant, does not hold there; it runs on one node.
"""

from __future__ import annotations

from memsvc import MemoryService, Scope
from tests.test_assemblies import *  # noqa: F403
from tests.test_checkpoints import *  # noqa: F403
from tests.test_memories_basic import *  # noqa: F403

del test_racing_adds_across_the_expiry_instant_agree_on_one_live_memory  # noqa: F821


async def test_deleting_an_assembly_member_detaches_it_on_the_tenant_s_shard(
    citus_service: MemoryService,
) -> None:
    """Once a known limit (row locks over arrays of tenant/id pairs): now tenant by tenant."""
    scope = Scope("acme", "bridge")
    kept = await citus_service.memories.add(scope, "stays", embedding=[1.0] * 384)
    member = await citus_service.memories.add(scope, "in an assembly", embedding=[0.5] * 384)
    group = await citus_service.assemblies.create(
        scope, "group", memory_ids=[kept.id, member.id]
    )
    assert await citus_service.memories.delete(member.id, tenant="acme")
    after = await citus_service.assemblies.get(group.id, tenant="acme")
    assert after.member_count == 1 and after.version > group.version
    recomputed = await citus_service.assemblies.recompute(group.id, tenant="acme")
    assert recomputed.member_count == 1
