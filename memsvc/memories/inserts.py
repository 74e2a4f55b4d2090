"""Inserting memories past duplicates: one (``add``) or a batch (``add_many``).

Content already stored in the exact scope is not stored again: a unique index
refuses the insert, and the memory it collided with is returned instead. An
expired memory counts as gone (see :mod:`memsvc.memories.expired`): it is
removed and the insert tried again. These run inside the caller's
transaction or block (the repository's), on its connection.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import asyncpg

from memsvc.core.errors import ConflictError
from memsvc.core.models import Memory, real_value
from memsvc.core.scope import Scope
from memsvc.db.sql import Params, scope_condition
from memsvc.memories import queries as q
from memsvc.memories.expired import DeleteLocked, remove_expired, split_live

# Rows per insert statement of a batch.
ADD_MANY_CHUNK = 2_000
# Inserts tried, each after removing the expired rows in the way.
ATTEMPTS = 3


def scope_params(scope: Scope) -> list[object]:
    """The scope's four levels, as the insert statements take them (``$1``-``$4``)."""
    return [scope.tenant, scope.project, scope.agent, scope.session]


async def find_duplicate(
    conn: asyncpg.Connection, schema: str, scope: Scope, memory_id: uuid.UUID, digest: str
) -> tuple[Memory | None, list[Any]]:
    """The live memory an add of ``digest``/``memory_id`` collides with, and the
    expired rows in its way (which count as gone)."""
    params = Params(scope.tenant, memory_id, digest)
    sql = q.find_duplicate(schema, scope_condition(scope, "exact", params))
    live, expired = split_live(await conn.fetch(sql, *params.values))
    for row in live:
        found = Memory.from_row(row)
        if found.id == memory_id and (found.content_hash != digest or found.scope != scope):
            raise ConflictError(f"id {memory_id} is already used by a different memory")
        return found, expired
    return None, expired


async def insert_one(
    conn: asyncpg.Connection,
    schema: str,
    sql: str,
    scope: Scope,
    args: list[object],
    delete_locked: DeleteLocked,
) -> tuple[Any, Memory | None]:
    """Insert one memory (``args`` of :func:`memsvc.memories.queries.insert_memory`).

    Returns the inserted row, or (None and) the live memory it duplicates.
    """
    memory_id, digest = args[4], args[6]
    assert isinstance(memory_id, uuid.UUID) and isinstance(digest, str)
    for _ in range(ATTEMPTS):
        row = await conn.fetchrow(sql, *args)
        if row is not None:
            return row, None
        existing, expired = await find_duplicate(conn, schema, scope, memory_id, digest)
        if existing is not None:
            return None, existing
        if expired:
            await remove_expired(conn, schema, expired, delete_locked)
        # The row we collided with expired, or was deleted in between: try again.
    raise ConflictError("memory could not be inserted: it kept colliding with a deletion")


async def insert_batch(
    conn: asyncpg.Connection,
    schema: str,
    sql: str,
    scope: Scope,
    columns: list[list[Any]],
    delete_locked: DeleteLocked,
) -> tuple[dict[uuid.UUID, Memory], dict[str, Memory]]:
    """Insert a batch (``columns`` of :func:`memsvc.memories.queries.insert_many`, ids first).

    Returns the memories stored or found, by id, and the live memories of
    the exact scope the items duplicate, by content fingerprint.
    """
    ids, digests = columns[0], columns[2]
    by_id: dict[uuid.UUID, Memory] = {}
    by_digest: dict[str, Memory] = {}
    chosen: list[int] | None = None  # None: every item
    for _ in range(ATTEMPTS):
        await _insert_items(conn, sql, scope, columns, chosen, by_id)
        absent = [i for i in chosen or range(len(ids)) if ids[i] not in by_id]
        if not absent:
            break
        params = Params(scope.tenant, [ids[i] for i in absent], [digests[i] for i in absent])
        found_sql = q.find_batch_duplicates(schema, scope_condition(scope, "exact", params))
        live, expired = split_live(await conn.fetch(found_sql, *params.values))
        for row in live:
            found = Memory.from_row(row)
            by_id.setdefault(found.id, found)
            if found.scope == scope and found.key is None:
                by_digest[found.content_hash] = found
        if not expired:
            break
        # Expired rows count as gone: remove them, insert those items again.
        await remove_expired(conn, schema, expired, delete_locked)
        chosen = absent
    return by_id, by_digest


def inserted_memory(scope: Scope, args: list[Any], row: Any, vector: Any) -> Memory:
    """The memory :func:`insert_one` stored (``args`` as it took them, ``row`` its result).

    Built from what the caller sent and what the server decided: reading the
    row back (its embedding above all) would double the traffic.
    """
    return Memory(
        id=args[4],
        scope=scope,
        content=args[5],
        content_hash=args[6],
        metadata=json.loads(args[7]),
        embedding=None if vector is None else vector.tolist(),
        # the column is REAL: report what a read returns
        importance=real_value(args[9]),
        version=row["version"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        expires_at=row["expires_at"],
        valid_from=row["valid_from"],
        supersedes=tuple(args[12] or ()),
        pinned=args[13],
    )


def batch_memories(
    scope: Scope,
    ids: list[uuid.UUID],
    digests: list[str],
    by_id: dict[uuid.UUID, Memory],
    by_digest: dict[str, Memory],
) -> list[Memory]:
    """One memory per item of a batch, in order (see :func:`insert_batch`'s result).

    The memory stored under the item's id, else the live one its content
    duplicates; an id already used by another memory is a ConflictError.
    """
    result = []
    for i, memory_id in enumerate(ids):
        memory = by_id.get(memory_id)
        if memory is not None and (memory.content_hash != digests[i] or memory.scope != scope):
            raise ConflictError(f"items[{i}].id {memory_id} is already used by another memory")
        memory = memory or by_digest.get(digests[i])
        if memory is None:
            raise ConflictError(f"items[{i}] collided with a memory deleted meanwhile; retry")
        result.append(memory)
    return result


async def _insert_items(
    conn: asyncpg.Connection,
    sql: str,
    scope: Scope,
    columns: list[list[Any]],
    chosen: list[int] | None,
    by_id: dict[uuid.UUID, Memory],
) -> None:
    """Insert a batch's items (``chosen`` indexes of the parallel ``columns``;
    None: all of them) in chunks; the rows inserted go into ``by_id``."""
    if chosen is not None:
        columns = [[column[i] for i in chosen] for column in columns]
    for start in range(0, len(columns[0]), ADD_MANY_CHUNK):
        chunk = slice(start, start + ADD_MANY_CHUNK)
        rows = await conn.fetch(sql, *scope_params(scope), *(column[chunk] for column in columns))
        for row in rows:
            by_id[row["id"]] = Memory.from_row(row)
