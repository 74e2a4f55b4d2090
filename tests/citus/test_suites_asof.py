"""The single-node as-of tests, on the cluster, and what differs there.

Imported here, they run with ``tests/citus/conftest.py``'s ``service`` and
``settings`` (the distributed schema, emptied per test): each as-of
statement names its tenant and runs whole on the node holding it; a read by
id without a tenant looks the ids' tenants up first.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from memsvc import MemoryService, NotFoundError, Scope, ValidationError
from tests.test_memories_asof import *  # noqa: F403

LEFT_OUT = (
    # It times gc against a 0.3 s sleep (gc must be waiting for a lock by
    # then); on the cluster gc's pass over each tenant reaches it later.
    "test_gc_places_an_expired_memorys_deletion_at_its_start_with_the_same_answers",
    # No cluster involved: they start servers of their own.
    "test_the_embedded_server_turns_commit_timestamps_on_once",
    "test_without_commit_timestamps_the_error_names_the_setting",
    "test_a_commit_not_yet_visible_is_waited_for_not_missed",
    # On Citus a transaction's snapshot is per node, taken when it first
    # reaches the node: see the variant below.
    "test_caller_repeatable_read_transaction_reads_its_snapshot",
)
for _name in LEFT_OUT:
    del globals()[_name]


def _now() -> datetime:
    return datetime.now(UTC)


async def test_a_repeatable_read_transaction_reads_the_snapshot_of_the_tenants_node(
    citus_service: MemoryService,
) -> None:
    """The guard runs on the node holding the tenant, against that node's snapshot."""
    scope = Scope("acme", "p", "a", "s")
    memory = await citus_service.memories.add(scope, "v1")
    async with citus_service.pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
        # The transaction reaches the tenant's node: its snapshot there is taken.
        assert (await citus_service.memories.get(memory.id, tenant="acme", conn=conn)).version == 1
        await citus_service.memories.update(memory.id, content="v2", tenant="acme")
        with pytest.raises(ValidationError, match="future"):
            await citus_service.memories.get(memory.id, tenant="acme", as_of=_now(), conn=conn)
    assert (
        await citus_service.memories.get(memory.id, tenant="acme", as_of=_now())
    ).content == "v2"


async def test_a_tenant_erased_is_gone_from_the_past_too(citus_service: MemoryService) -> None:
    memories = citus_service.memories
    doomed = await memories.add(Scope("acme", "p", "a", "s"), "words to forget")
    await memories.update(doomed.id, content="more words to forget", tenant="acme")
    deleted = await memories.add(Scope("acme", "p"), "deleted before the erasure")
    await memories.delete(deleted.id, tenant="acme")
    kept = await memories.add(Scope("other", "p"), "words to keep")
    await asyncio.sleep(0.01)
    t = _now()
    assert (await memories.get(doomed.id, as_of=t)).content == "more words to forget"
    receipt = await citus_service.erase(Scope("acme"))
    assert receipt.verified
    for memory_id in (doomed.id, deleted.id):
        with pytest.raises(NotFoundError):
            await memories.get(memory_id, as_of=t)
        with pytest.raises(NotFoundError):
            await memories.get(memory_id, tenant="acme", as_of=t)
    assert await memories.list(Scope("acme"), include="descendants", as_of=t) == []
    assert await memories.count(Scope("acme"), include="descendants", as_of=t) == 0
    assert [m.id for m in await memories.list(Scope("other"), as_of=t, include="descendants")] == [
        kept.id
    ]


async def test_as_of_reads_by_id_span_tenants_as_on_one_server(
    citus_service: MemoryService,
) -> None:
    """Without a tenant, the ids' tenants are looked up and each is read on its node."""
    memories = citus_service.memories
    ids = {}
    for tenant in ("acme", "globex", "initech"):
        ids[tenant] = (await memories.add(Scope(tenant, "p"), f"{tenant} v1")).id
    await asyncio.sleep(0.01)
    t = _now()
    for tenant, memory_id in ids.items():
        await memories.update(memory_id, content=f"{tenant} v2", tenant=tenant)
    await memories.delete(ids["globex"], tenant="globex")
    got = await memories.get_many(list(ids.values()), as_of=t)
    assert sorted(m.content for m in got) == ["acme v1", "globex v1", "initech v1"]
    assert (await memories.get(ids["globex"], as_of=t)).content == "globex v1"
    only_acme = await memories.get_many(list(ids.values()), tenant="acme", as_of=t)
    assert [m.content for m in only_acme] == ["acme v1"]
    with pytest.raises(NotFoundError):
        await memories.get(ids["globex"], as_of=_now())
