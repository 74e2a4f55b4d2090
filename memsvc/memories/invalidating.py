"""Ending a memory's validity without a successor: ``svc.memories.invalidate``.

Valid time as a whole is described in :mod:`memsvc.memories.validity`.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import asyncpg

from memsvc.core.ids import parse_id
from memsvc.core.models import Memory
from memsvc.core.scope import Scope
from memsvc.db.repository import Repository
from memsvc.memories import validity
from memsvc.telemetry import traced_operations


@traced_operations("memsvc.memories")
class Invalidating(Repository):
    """The invalidate method of :class:`memsvc.memories.repository.MemoryRepository`."""

    async def invalidate(
        self,
        id: uuid.UUID | str,
        *,
        at: datetime | None = None,
        expected_version: int | None = None,
        tenant: str | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> Memory:
        """End a memory's validity at ``at`` (default: now) without a successor.

        For a fact that stopped being true. The memory stays readable (``get``,
        ``valid="all"``, ``valid_at`` before ``at``) with an ``invalidated``
        history event. A memory already superseded or invalidated is a
        ConflictError, as is a mismatched ``expected_version``; ``at`` must
        come after the memory's ``valid_from`` (ValidationError). Returns
        the memory as changed.
        """
        memory_id = parse_id("id", id)
        moment = validity.check_optional_time(at, "at")
        expected = {memory_id: validity.check_expected_version(expected_version)}
        if tenant is not None:
            tenant = Scope(tenant).tenant

        async def attempt() -> Any:
            async with self._transaction(conn, tenant=tenant) as active:
                rows, _ = await validity.lock_open(
                    active, self._schema, [memory_id], tenant, successor=None, expected=expected
                )
                when = rows[0]["now"] if moment is None else moment
                validity.check_closable(rows, when, "at", None)
                closed = await validity.close(
                    active, self._schema, rows[0]["tenant_id"], [memory_id], when, None
                )
            return closed[0]

        return Memory.from_row(await self._retrying(attempt, owns_transaction=conn is None))
