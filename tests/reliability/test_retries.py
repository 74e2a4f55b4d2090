"""Serialization failures and deadlocks (40001, 40P01) are retried where memsvc
owns the transaction; other errors are raised at once.

Failures are real PostgreSQL errors: a deadlock between memsvc's ``delete`` and
a raw transaction taking the same locks in the opposite order, and a trigger
installed in the test database that fails the first statement it sees.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from memsvc import MemoryService, Scope, ValidationError
from tests.reliability.conftest import bounded

FAIL_FIRST_STATEMENT = """
CREATE SEQUENCE public.injected_attempts;
CREATE FUNCTION public.fail_first_statement() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- nextval is not rolled back with the failed transaction, so only the very
    -- first statement ever fails and the sequence counts every attempt.
    IF nextval('public.injected_attempts') = 1 THEN
        RAISE EXCEPTION 'injected failure' USING ERRCODE = '{sqlstate}';
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER fail_first_statement BEFORE INSERT OR UPDATE OR DELETE ON memsvc.{table}
    FOR EACH STATEMENT EXECUTE FUNCTION public.fail_first_statement();
"""


async def _install_failure(admin: asyncpg.Connection, table: str, sqlstate: str) -> None:
    await admin.execute(FAIL_FIRST_STATEMENT.format(table=table, sqlstate=sqlstate))


async def _attempts(admin: asyncpg.Connection) -> int:
    row = await admin.fetchrow("SELECT last_value, is_called FROM public.injected_attempts")
    return int(row["last_value"]) if row["is_called"] else 0


Operation = Callable[[MemoryService, Scope, Any], Awaitable[None]]


async def _setup_memory(service: MemoryService, scope: Scope) -> Any:
    return await service.memories.add(scope, "already stored", metadata={"a": 1})


async def _add(service: MemoryService, scope: Scope, _: Any) -> None:
    memory = await service.memories.add(scope, "a new memory")
    assert (await service.memories.get(memory.id)).content == "a new memory"


async def _add_many(service: MemoryService, scope: Scope, _: Any) -> None:
    stored = await service.memories.add_many(scope, ["one", "two", "three"])
    assert len(await service.memories.get_many([m.id for m in stored])) == 3


async def _put(service: MemoryService, scope: Scope, _: Any) -> None:
    await service.memories.put(scope, "status", "green")
    assert (await service.memories.get_by_key(scope, "status")).content == "green"


async def _update(service: MemoryService, scope: Scope, memory: Any) -> None:
    await service.memories.update(memory.id, content="changed")
    assert (await service.memories.get(memory.id)).content == "changed"


async def _patch(service: MemoryService, scope: Scope, memory: Any) -> None:
    await service.memories.patch_metadata(memory.id, {"b": 2})
    assert (await service.memories.get(memory.id)).metadata == {"a": 1, "b": 2}


async def _delete(service: MemoryService, scope: Scope, memory: Any) -> None:
    assert await service.memories.delete(memory.id) is True
    assert await service.memories.count(scope) == 0


async def _delete_scope(service: MemoryService, scope: Scope, memory: Any) -> None:
    assert await service.memories.delete_scope(scope) == 1
    assert await service.memories.count(scope) == 0


async def _add_members(service: MemoryService, scope: Scope, memory: Any) -> None:
    assembly = await service.assemblies.get_by_name(scope, "group")
    after = await service.assemblies.add_members(assembly.id, [memory.id])
    assert after.member_count == 1


async def _checkpoint(service: MemoryService, scope: Scope, _: Any) -> None:
    checkpoint = await service.checkpoints.create(scope, {"step": 3})
    assert (await service.checkpoints.get(checkpoint.id)).data == {"step": 3}


OPERATIONS: dict[str, tuple[str, Operation]] = {
    "memories.add": ("memories", _add),
    "memories.add_many": ("memories", _add_many),
    "memories.put": ("memories", _put),
    "memories.update": ("memories", _update),
    "memories.patch_metadata": ("memories", _patch),
    "memories.delete": ("memories", _delete),
    "memories.delete_scope": ("memories", _delete_scope),
    "assemblies.add_members": ("assembly_members", _add_members),
    "checkpoints.create": ("session_checkpoints", _checkpoint),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sqlstate", ["40001", "40P01"])
@pytest.mark.parametrize("name", list(OPERATIONS))
async def test_serialization_failures_and_deadlocks_are_retried(
    service: MemoryService, admin: asyncpg.Connection, scope: Scope, name: str, sqlstate: str
) -> None:
    table, operation = OPERATIONS[name]
    memory = await _setup_memory(service, scope)
    await service.assemblies.create(scope, "group")
    await _install_failure(admin, table, sqlstate)
    await bounded(operation(service, scope, memory), 30)
    assert await _attempts(admin) >= 2, "the failed statement was not run again"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["memories.add", "memories.delete", "assemblies.add_members"])
async def test_other_errors_are_raised_at_once_without_retry(
    service: MemoryService, admin: asyncpg.Connection, scope: Scope, name: str
) -> None:
    table, operation = OPERATIONS[name]
    memory = await _setup_memory(service, scope)
    await service.assemblies.create(scope, "group")
    await _install_failure(admin, table, "23514")  # check_violation: retrying cannot help
    with pytest.raises(ValidationError):
        await bounded(operation(service, scope, memory), 30)
    assert await _attempts(admin) == 1


@pytest.mark.timeout(60)
async def test_real_deadlock_with_a_raw_transaction_is_retried_by_delete(
    open_service, admin: asyncpg.Connection, scope: Scope
) -> None:
    """memsvc's delete locks memory, then assembly; a raw transaction locks the
    assembly, then the memory. PostgreSQL breaks the cycle by aborting memsvc's
    transaction (its deadlock_timeout is shorter); the retry then succeeds."""
    database = await admin.fetchval("SELECT current_database()")
    await admin.execute(f"ALTER DATABASE {database} SET deadlock_timeout = '100ms'")
    async with open_service() as service:
        memory = await service.memories.add(scope, "member of a group")
        assembly = await service.assemblies.create(scope, "group", memory_ids=[memory.id])
        await admin.execute("SET deadlock_timeout = '60s'")  # memsvc's side detects it
        raw = admin.transaction()
        await raw.start()
        try:
            await admin.execute(
                "SELECT 1 FROM memsvc.assemblies WHERE id = $1 FOR UPDATE", assembly.id
            )
            deleting = asyncio.create_task(service.memories.delete(memory.id))
            await bounded(_until_memsvc_waits_on_a_lock(admin), 20)
            # Blocks on the memory row memsvc holds: the cycle is closed. It returns
            # only once PostgreSQL aborted memsvc's transaction (the deadlock).
            await bounded(
                admin.execute("SELECT 1 FROM memsvc.memories WHERE id = $1 FOR UPDATE", memory.id),
                20,
            )
        finally:
            await raw.rollback()
        assert await bounded(deleting, 20) is True
        assert await service.memories.count(scope) == 0
        assert (await service.assemblies.get(assembly.id)).member_count == 0


async def _until_memsvc_waits_on_a_lock(admin: asyncpg.Connection) -> None:
    while not await admin.fetchval(
        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'memsvc'"
        " AND datname = current_database() AND wait_event_type = 'Lock')"
    ):
        await asyncio.sleep(0.02)
