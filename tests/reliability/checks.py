"""Invariants the reliability tests check after faults: what was acknowledged is
there, what is there is whole, and an unknown outcome resolves by retrying."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import asyncpg

from memsvc import MemoryService, Scope


@dataclass
class WriteLedger:
    """What a test's writers were told: acknowledged, or failed with an unknown outcome."""

    acknowledged: dict[uuid.UUID, str] = field(default_factory=dict)
    unknown: dict[uuid.UUID, str] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)

    def failed(self, memory_id: uuid.UUID, content: str, exc: BaseException) -> None:
        """Record a write whose call raised: it may or may not have committed."""
        self.unknown[memory_id] = content
        name = type(exc).__name__
        self.errors[name] = self.errors.get(name, 0) + 1


async def assert_every_row_has_its_created_event(conn: asyncpg.Connection, schema: str) -> None:
    """No half-written memory: each row has exactly one 'created' event, and each
    'created' event belongs to a row (nothing here deletes memories)."""
    orphans = await conn.fetchval(
        f"SELECT count(*) FROM {schema}.memories m WHERE NOT EXISTS ("
        f" SELECT 1 FROM {schema}.memory_events e"
        " WHERE e.memory_id = m.id AND e.tenant_id = m.tenant_id AND e.kind = 'created')"
    )
    assert orphans == 0, f"{orphans} memories lack their 'created' event"
    ghosts = await conn.fetchval(
        f"SELECT count(*) FROM {schema}.memory_events e WHERE e.kind = 'created'"
        f" AND NOT EXISTS (SELECT 1 FROM {schema}.memories m"
        " WHERE m.id = e.memory_id AND m.tenant_id = e.tenant_id)"
    )
    assert ghosts == 0, f"{ghosts} 'created' events have no memory"
    doubled = await conn.fetchval(
        f"SELECT count(*) FROM (SELECT memory_id FROM {schema}.memory_events"
        " WHERE kind = 'created' GROUP BY tenant_id, memory_id HAVING count(*) > 1) d"
    )
    assert doubled == 0, f"{doubled} memories have several 'created' events"


async def assert_ledger_holds(service: MemoryService, scope: Scope, ledger: WriteLedger) -> None:
    """Every acknowledged write is stored as acknowledged; every unknown outcome
    resolves by retrying with the same client id; nothing else is in the scope."""
    ids = list(ledger.acknowledged)
    stored = {m.id: m for m in await service.memories.get_many(ids)}
    lost = [i for i in ids if i not in stored]
    assert not lost, f"{len(lost)} acknowledged writes were lost, e.g. {lost[:3]}"
    for memory_id, content in ledger.acknowledged.items():
        assert stored[memory_id].content == content
    for memory_id, content in ledger.unknown.items():
        retried = await service.memories.add(scope, content, id=memory_id)
        assert retried.id == memory_id and retried.content == content
    present: set[uuid.UUID] = set()
    after = None
    while True:
        page = await service.memories.list(scope, limit=1000, after=after)
        if not page:
            break
        present.update(m.id for m in page)
        after = page[-1].id
    expected = set(ledger.acknowledged) | set(ledger.unknown)
    assert present == expected, (
        f"scope holds {len(present - expected)} unexpected and lacks "
        f"{len(expected - present)} expected memories"
    )
    assert await service.memories.count(scope) == len(expected)
