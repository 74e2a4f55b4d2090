"""Adds that collide with an expired (or forgotten) memory: it counts as gone.

A forgotten memory (see :mod:`memsvc.ops.forget`) is treated as an expired
one here: adding its content again stores it anew.

An expired memory is invisible to every read and waits only for gc. An add
of the same content in the same scope (or with the same id) meets it in the
unique index, and returning it would hand the caller a memory that ``get``
then says does not exist. So deduplication ignores it: the add removes the
expired row as gc would (under a row lock, re-checked, with its ``deleted``
event and its assemblies detached) and stores a new memory, with a new id
(or the caller's), new timestamps and ``version`` 1.

Racing adds of that content agree on one new memory: the removal locks the
row, so one of them deletes it, and the unique index then makes the others'
inserts collide with the new (live) row, which they return. An expiry
extended meanwhile keeps its row (the lock re-checks it), and that live row
is returned.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg

from memsvc.db.sql import by_tenant
from memsvc.memories import queries as q

DeleteLocked = Callable[[asyncpg.Connection, Sequence[Any]], Awaitable[int]]


def split_live(rows: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """Collided rows (with a ``live`` column) as (live, expired)."""
    live = [row for row in rows if row["live"]]
    return live, [row for row in rows if not row["live"]]


async def remove_expired(
    conn: asyncpg.Connection, schema: str, rows: Sequence[Any], delete_locked: DeleteLocked
) -> int:
    """Delete the expired ``rows`` (``tenant_id``, ``id``) still expired, as gc would.

    In a transaction of its own (a savepoint in the caller's), so the lock,
    the detaching of assemblies and the delete go together.
    """
    sql = q.lock_expired(schema)
    async with conn.transaction():
        locked = []
        for tenant, ids in by_tenant((row["tenant_id"], row["id"]) for row in rows):
            locked.extend(await conn.fetch(sql, tenant, ids))
        return await delete_locked(conn, locked)
