"""Reading memories (``svc.memories``): by id or key, pages, counts, history, as of a moment.

:class:`MemoryReads` holds the read methods of
:class:`memsvc.memories.repository.MemoryRepository`, which adds the writes
and search.
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Awaitable, Iterable
from datetime import datetime
from typing import Any

import asyncpg

from memsvc.core.errors import NotFoundError, ValidationError
from memsvc.core.ids import parse_id
from memsvc.core.models import Memory, MemoryEvent
from memsvc.core.scope import Include, Scope, validate_include
from memsvc.core.validation import validate_limit, validate_name, validate_scope, validate_sequence
from memsvc.db.repository import Repository, citus_limited
from memsvc.db.sql import Params, scope_condition
from memsvc.memories import queries as q
from memsvc.memories.asof import (
    ALL,
    AsOfReads,
    by_ids_statement,
    count_statement,
    in_scope_statement,
    tenants_of_ids,
    validate_as_of,
)
from memsvc.memories.validity import Valid, Validity, check_validity, validity_sql
from memsvc.telemetry import traced_operations

MAX_PAGE = 10_000
KEY_MAX_LENGTH = 1024


@traced_operations("memsvc.memories")
class MemoryReads(Repository):
    """Reads of long-term memories; never routed to a replica when they must see a write."""

    _by_ids_sql: dict[tuple[bool, bool, bool], str]
    _as_of: AsOfReads

    def _init_reads(self) -> None:
        # get's statements, by (track_access, one id, tenant filter): built
        # once, not per call.
        self._by_ids_sql = {
            (touch, single, tenant): make(self._schema, tenant)
            for touch, single, make in (
                (False, True, q.select_by_id),
                (False, False, q.select_by_ids),
                (True, True, q.touch_by_id),
                (True, False, q.touch_by_ids),
            )
            for tenant in (False, True)
        }
        self._as_of = AsOfReads()

    async def get_by_key(
        self,
        scope: Scope,
        key: str,
        *,
        as_of: datetime | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> Memory:
        """The memory stored under ``key`` in this exact scope (NotFoundError if none).

        With ``as_of`` (a timezone-aware datetime): the memory stored under
        the key as committed at that moment (see :meth:`get`).
        """
        scope = validate_scope(scope)
        params = Params(validate_name(key, "key", KEY_MAX_LENGTH))
        if as_of is not None:
            rows = await self._read_as_of(scope, "exact", as_of, conn, key=key)
            if not rows:
                raise NotFoundError(f"no memory under key {key!r} in this scope at {as_of}")
            return rows[0]
        sql = q.select_by_key(self._schema, scope_condition(scope, "exact", params))
        row = await self._read(
            conn, lambda active: active.fetchrow(sql, *params.values), tenant=scope.tenant
        )
        if row is None:
            raise NotFoundError(f"no memory under key {key!r} in this scope")
        return Memory.from_row(row)

    async def get(
        self,
        id: uuid.UUID | str,
        *,
        tenant: str | None = None,
        track_access: bool = False,
        as_of: datetime | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> Memory:
        """The memory with this id (NotFoundError if missing or expired).

        With ``track_access`` the read also counts the access
        (``access_count``, ``last_accessed_at``).

        With ``as_of`` (a timezone-aware datetime): the memory as committed
        at that moment, rebuilt from its history: a memory deleted since
        reappears as it was, later updates are not shown, one created later
        or expired by then is not found. Exact to the commit (see the
        docs/how-to/as-of.md); ``embedding`` is None unless the memory
        still has the version it had then, access statistics are 0/None. A
        moment in the future or before the history horizon is a
        ValidationError.
        """
        if as_of is not None and track_access:
            raise ValidationError("track_access", "an as_of read is not an access")
        found = await self._by_ids([parse_id("id", id)], tenant, track_access, conn, as_of)
        if len(found) != 1:
            self._exactly_one(len(found), f"memory {id}")
        return found[0]

    async def get_many(
        self,
        ids: Iterable[uuid.UUID | str],
        *,
        tenant: str | None = None,
        as_of: datetime | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> builtins.list[Memory]:
        """The memories that exist among ``ids``, in the order asked for.

        ``as_of``: those that existed at that moment, as they were (see :meth:`get`).
        """
        wanted = [
            parse_id(f"ids[{i}]", value) for i, value in enumerate(validate_sequence(ids, "ids"))
        ]
        found = {m.id: m for m in await self._by_ids(wanted, tenant, False, conn, as_of)}
        return [found[i] for i in dict.fromkeys(wanted) if i in found]

    async def _by_ids(
        self,
        ids: builtins.list[uuid.UUID],
        tenant: str | None,
        track_access: bool,
        conn: asyncpg.Connection | None,
        as_of: datetime | None = None,
    ) -> builtins.list[Memory]:
        if tenant is not None:
            tenant = Scope(tenant).tenant
        if as_of is not None:
            moment = validate_as_of(as_of)
            rows = []
            for each in await self._as_of_tenants(ids, tenant, conn):
                as_of_sql, values = by_ids_statement(self._schema, ids, each, moment)
                rows += await self._as_of_rows(conn, as_of_sql, values, moment, each)
            return [Memory.from_row(row) for row in rows if row["id"] is not None]
        single = len(ids) == 1
        key: object = ids[0] if single else ids
        sql = self._by_ids_sql[track_access, single, tenant is not None]
        args: builtins.list[object] = [key] if tenant is None else [key, tenant]
        if track_access and tenant is None:
            # The id may exist in several tenants: that get fails, and must
            # not have counted an access of each.
            async with self._transaction(conn, tenant=tenant) as active:
                rows = await active.fetch(sql, *args)
                if len(rows) > 1:
                    self._exactly_one(len(rows), f"memory {ids[0]}")
        elif track_access:
            async with self._connection(conn, tenant=tenant) as active:
                rows = await active.fetch(sql, *args)
        else:
            rows = await self._read(conn, lambda active: active.fetch(sql, *args), tenant=tenant)
        return [Memory.from_row(row) for row in rows]

    async def list(
        self,
        scope: Scope,
        *,
        limit: int = 100,
        after: uuid.UUID | str | None = None,
        include: Include = "exact",
        as_of: datetime | None = None,
        valid: Valid = "now",
        valid_at: datetime | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> builtins.list[Memory]:
        """One page of live memories in creation order.

        Pass the last id of a page as ``after`` to get the next one (keyset
        pagination: stable and fast however deep you page). ``as_of``: the
        memories of the scope as committed at that moment (see :meth:`get`);
        page through them with the same ``as_of``. ``valid``: ``now`` (only
        memories valid now; with ``as_of``, valid at that moment) or ``all``;
        ``valid_at``: only memories valid at that moment (see
        docs/how-to/valid-time.md).
        """
        scope = validate_scope(scope)
        include = validate_include(include)
        limit = validate_limit(limit, "limit", MAX_PAGE)
        validity = check_validity(valid, valid_at)
        if as_of is not None:
            after_id = None if after is None else parse_id("after", after)
            return await self._read_as_of(
                scope, include, as_of, conn, after=after_id, limit=limit, validity=validity
            )
        params = Params()
        scope_sql = scope_condition(scope, include, params)
        after_param = None if after is None else params.add(parse_id("after", after))
        valid_sql = validity_sql(validity, params.add)
        sql = q.list_page(self._schema, scope_sql, after_param, params.add(limit), valid_sql)
        rows = await self._read(
            conn, lambda active: active.fetch(sql, *params.values), tenant=scope.tenant
        )
        return [Memory.from_row(row) for row in rows]

    async def count(
        self,
        scope: Scope,
        *,
        include: Include = "exact",
        as_of: datetime | None = None,
        valid: Valid = "now",
        valid_at: datetime | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> int:
        """Number of live memories in a scope (``as_of``: at that moment, see :meth:`get`).

        ``valid`` and ``valid_at`` as in :meth:`list`.
        """
        scope = validate_scope(scope)
        validity = check_validity(valid, valid_at)
        if as_of is not None:
            moment = validate_as_of(as_of)
            as_of_sql, values = count_statement(
                self._schema, scope, validate_include(include), moment, validity
            )
            rows = await self._as_of_rows(conn, as_of_sql, values, moment, scope.tenant)
            counted: int = rows[0]["n"]
            return counted
        params = Params()
        scope_sql = scope_condition(scope, validate_include(include), params)
        sql = q.count(self._schema, scope_sql, validity_sql(validity, params.add))
        result: int = await self._read(
            conn, lambda active: active.fetchval(sql, *params.values), tenant=scope.tenant
        )
        return result

    async def _read_as_of(
        self,
        scope: Scope,
        include: Include,
        as_of: object,
        conn: asyncpg.Connection | None,
        *,
        key: str | None = None,
        after: uuid.UUID | None = None,
        limit: int | None = None,
        validity: Validity = ALL,
    ) -> builtins.list[Memory]:
        """A scope's memories at ``as_of`` (under a key, or a page after an id), id order."""
        moment = validate_as_of(as_of)
        sql, values = in_scope_statement(
            self._schema, scope, include, moment, key=key, after=after, limit=limit,
            validity=validity,
        )
        rows = await self._as_of_rows(conn, sql, values, moment, scope.tenant)
        return [Memory.from_row(row) for row in rows if row["id"] is not None]

    async def _as_of_tenants(
        self, ids: builtins.list[uuid.UUID], tenant: str | None, conn: asyncpg.Connection | None
    ) -> builtins.list[str | None]:
        """The tenants an as-of read by id runs for: ``tenant``, or on Citus each holding an id.

        Citus cannot plan the statement over every tenant's shards (it joins
        the ledger with the rows), only for one tenant, routed to the node
        holding it. The tenants are those of the ids' rows and events (a
        deleted memory has only events); none found, the statement still
        runs once, for a tenant holding nothing, so the moment is checked
        as on one server.
        """
        if tenant is not None or not await self._on_citus():
            return [tenant]
        sql = tenants_of_ids(self._schema)
        rows = await self._read(conn, lambda active: active.fetch(sql, ids), tenant=None)
        return [row["tenant_id"] for row in rows] or [""]

    @citus_limited("memories reads with as_of")
    def _as_of_rows(
        self,
        conn: asyncpg.Connection | None,
        sql: str,
        values: builtins.list[object],
        moment: datetime,
        tenant: str | None,
    ) -> Awaitable[builtins.list[Any]]:
        """An as-of statement's rows, read on the primary (see :mod:`memsvc.memories.asof`)."""
        return self._read(
            conn,
            lambda active: self._as_of.fetch(active, sql, values, moment),
            routed=False,  # a replica may not have replayed the moment yet
            tenant=tenant,
        )

    async def history(
        self,
        id: uuid.UUID | str,
        *,
        tenant: str | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> builtins.list[MemoryEvent]:
        """The memory's events, oldest first (see :class:`memsvc.core.models.MemoryEvent`)."""
        memory_id = parse_id("id", id)
        tenant_param, args = self._by_id(memory_id, tenant)
        sql = q.history(self._schema, tenant_param)
        rows = await self._read(conn, lambda active: active.fetch(sql, *args), tenant=tenant)
        return [MemoryEvent.from_row(row) for row in rows]
