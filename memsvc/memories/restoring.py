"""Restoring forgotten memories: ``svc.memories.restore`` (see :mod:`memsvc.ops.forget`)."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg

from memsvc.core.errors import NotFoundError
from memsvc.core.ids import parse_id
from memsvc.core.models import Memory
from memsvc.db.repository import Repository
from memsvc.memories import forgetting_queries as forgetting_q
from memsvc.telemetry import traced_operations


@traced_operations("memsvc.memories")
class Restoring(Repository):
    """The restore method of :class:`memsvc.memories.repository.MemoryRepository`."""

    async def restore(
        self,
        id: uuid.UUID | str,
        *,
        tenant: str | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> Memory:
        """Bring back a forgotten memory: it is in every read again.

        Within ``Settings.forget_grace_days`` of its forgetting (later:
        NotFoundError, as gc may have deleted it). Restoring counts as an
        access (``access_count``, ``last_accessed_at``), which renews the
        memory's strength. A memory that is not forgotten is returned as it
        is. See docs/how-to/forgetting.md.
        """
        memory_id = parse_id("id", id)
        sql = forgetting_q.restore(self._schema, tenant is not None)
        args = [memory_id, tenant, self._settings.forget_grace_days * 86_400.0]

        async def attempt() -> Any:
            # A transaction: an id found in several tenants restores none of them.
            async with self._transaction(conn, tenant=tenant) as active:
                row = await active.fetchrow(sql, *args)
                self._exactly_one(row["found"], f"memory {memory_id}")
                return row

        row = await self._retrying(attempt, owns_transaction=conn is None)
        if not row["restored"] and row["was_forgotten_at"] is not None:
            raise NotFoundError(
                f"memory {memory_id} was forgotten at {row['was_forgotten_at']}, "
                f"past the grace period of {self._settings.forget_grace_days:g} days"
            )
        return Memory.from_row(row)
