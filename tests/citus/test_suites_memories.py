"""The single-node tests of memories, assemblies and checkpoints, run on the cluster.

Imported here, they run with ``tests/citus/conftest.py``'s ``service`` and
``settings`` (the distributed schema, emptied per test). Left out: the tests
of operations that are known limits on Citus (statements over arrays of
tenant/id pairs that lock or update rows, which Citus cannot route to one
shard); :func:`test_a_known_limit_is_a_typed_error_naming_the_operation`
shows what a caller gets instead.
"""

from __future__ import annotations

import pytest

from memsvc import CitusUnsupportedError, MemoryService, Scope
from tests.test_assemblies import *  # noqa: F403
from tests.test_checkpoints import *  # noqa: F403
from tests.test_memories_basic import *  # noqa: F403

KNOWN_LIMITS = {
    # Replacing an expired duplicate (locks expired rows by tenant/id arrays).
    "test_adding_the_content_of_an_expired_memory_stores_a_new_one": "memories.add",
    "test_an_expired_memory_s_id_can_be_added_again": "memories.add",
    "test_add_many_with_the_content_of_an_expired_memory_stores_a_new_one": "memories.add_many",
    "test_racing_adds_across_the_expiry_instant_agree_on_one_live_memory": "memories.add",
    # Detaching a deleted memory from its assemblies, recomputing them.
    "test_deleting_a_member_memory_updates_its_assemblies": "memories.delete",
    "test_concurrent_member_deletes_keep_count_and_centroid_exact": "memories.delete",
    "test_mixed_adds_removes_and_deletes_never_deadlock": "memories.delete",
    "test_changing_a_members_embedding_moves_the_centroid": "memories.update",
    "test_embeddings_changed_hook_refreshes_the_centroid": "memories.update",
    "test_recompute_agrees_with_the_incremental_aggregates": "assemblies.recompute",
}
for _name in KNOWN_LIMITS:
    del globals()[_name]


async def test_a_known_limit_is_a_typed_error_naming_the_operation(
    citus_service: MemoryService,
) -> None:
    scope = Scope("acme", "bridge")
    member = await citus_service.memories.add(scope, "in an assembly", embedding=[1.0] * 384)
    await citus_service.assemblies.create(scope, "group", memory_ids=[member.id])
    with pytest.raises(CitusUnsupportedError) as refused:
        await citus_service.memories.delete(member.id, tenant="acme")
    assert refused.value.operation == "memories.delete"
    assert (await citus_service.memories.get(member.id, tenant="acme")).id == member.id
