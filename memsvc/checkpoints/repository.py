"""Durable session checkpoints (``svc.checkpoints``).

A checkpoint is a JSON snapshot of a session's state, stored in PostgreSQL and
kept until retention drops it: every :meth:`CheckpointRepository.create`
keeps only the newest ``settings.checkpoint_keep_last`` checkpoints of its
session, in the same transaction as the insert.

Concurrent creates for one session are serialized by a transaction-scoped
advisory lock on the session, so retention is exact: the session never holds
more than N checkpoints after a create commits, and a create never drops one
of the newest N. (A lock-free insert-then-prune cannot promise that: two
creates whose snapshots miss each other's rows can both keep N - 1 old ones.)
"Newest" is ``(created_at, id)`` order; ``created_at`` is taken with
``clock_timestamp()`` after the lock is granted, so it follows the database
server's wall clock.
"""

from __future__ import annotations

import builtins
import json
import uuid
from typing import Any

import asyncpg

from memsvc.changes.signal import signals_changes
from memsvc.checkpoints import queries as q
from memsvc.core import jsontext
from memsvc.core.errors import NotFoundError, ValidationError
from memsvc.core.ids import new_id, parse_id
from memsvc.core.models import Checkpoint, scope_from_row
from memsvc.core.scope import Scope
from memsvc.core.validation import (
    encode_json,
    validate_limit,
    validate_scope,
    validate_tenant,
    validate_text,
)
from memsvc.db.repository import Repository
from memsvc.db.sql import Params, scope_condition
from memsvc.telemetry import traced_operations

MAX_DESCRIPTION_BYTES = 64 * 1024
MAX_PAGE = 10_000
MAX_KEEP = 1_000_000


def _session_scope(value: object) -> Scope:
    scope = validate_scope(value)
    if scope.session is None:
        raise ValidationError("scope.session", "checkpoints belong to a session: set one")
    return scope


def _checkpoint(row: Any, data: Any) -> Checkpoint:
    # Not Checkpoint.from_row: it re-parses str values as JSON text, which is
    # wrong for a checkpoint whose data is itself a JSON string.
    return Checkpoint(
        id=row["id"],
        scope=scope_from_row(row),
        description=row["description"],
        data=data,
        size_bytes=row["size_bytes"],
        created_at=row["created_at"],
    )


def _from_row(row: Any) -> Checkpoint:
    return _checkpoint(row, row.get("data"))


@traced_operations("memsvc.checkpoints")
@signals_changes("create", "delete", "prune")
class CheckpointRepository(Repository):
    """Durable snapshots of session state, newest N kept per session."""

    def _session_key(self, scope: Scope) -> str:
        # JSON of the levels is injective (None and every string encode
        # distinctly), so two sessions only share a lock on a hash collision.
        return json.dumps(["memsvc.session_checkpoints", self._schema, *scope.levels])

    async def create(
        self,
        scope: Scope,
        data: Any,
        *,
        description: str = "",
        conn: asyncpg.Connection | None = None,
    ) -> Checkpoint:
        """Save a checkpoint of a session and apply retention.

        Args:
            scope: The session (``scope.session`` must be set).
            data: Any JSON value, at most ``settings.max_checkpoint_bytes`` as JSON text.
            description: What the checkpoint marks.
            conn: A connection (and transaction) of your own to run on; the
                session stays locked for other creates until it commits.

        Returns:
            The checkpoint, with ``data`` as given (round-tripped through JSON).
        """
        scope = _session_scope(scope)
        text = encode_json("data", data, self._settings.max_checkpoint_bytes)
        note = validate_text(description, MAX_DESCRIPTION_BYTES, "description")
        size = len(text.encode("utf-8"))
        params = Params(*scope.levels, new_id(), note, text, size)
        scope_sql = scope_condition(scope, "exact", params)
        sql = q.insert_and_prune(
            self._schema, scope_sql, params.add(self._settings.checkpoint_keep_last)
        )
        key = self._session_key(scope)

        async def attempt() -> Checkpoint:
            async with self._transaction(conn, tenant=scope.tenant) as active:
                await active.execute(q.lock_session(), key)
                row = await active.fetchrow(sql, *params.values)
            assert row is not None
            return _checkpoint(row, jsontext.loads(text))

        return await self._retrying(attempt, owns_transaction=conn is None)

    async def get(
        self,
        id: uuid.UUID | str,
        *,
        tenant: str | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> Checkpoint:
        """The checkpoint with this id, with its data (NotFoundError if none)."""
        checkpoint_id = parse_id("id", id)
        tenant = validate_tenant(tenant)
        tenant_param, args = self._by_id(checkpoint_id, tenant)
        sql = q.select_by_id(self._schema, tenant_param)
        rows = await self._read(conn, lambda active: active.fetch(sql, *args), tenant=tenant)
        self._exactly_one(len(rows), f"checkpoint {checkpoint_id}")
        return _from_row(rows[0])

    async def latest(self, scope: Scope, *, conn: asyncpg.Connection | None = None) -> Checkpoint:
        """The session's newest checkpoint, with its data (NotFoundError if none)."""
        scope = _session_scope(scope)
        params = Params()
        sql = q.latest(self._schema, scope_condition(scope, "exact", params))
        row = await self._read(
            conn, lambda active: active.fetchrow(sql, *params.values), tenant=scope.tenant
        )
        if row is None:
            raise NotFoundError("this session has no checkpoint")
        return _from_row(row)

    async def list(
        self,
        scope: Scope,
        *,
        limit: int = 100,
        after: uuid.UUID | str | Checkpoint | None = None,
        with_data: bool = False,
        conn: asyncpg.Connection | None = None,
    ) -> builtins.list[Checkpoint]:
        """One page of the session's checkpoints, newest first.

        ``data`` is left out (None) unless ``with_data``: pages stay small
        however large the snapshots are; fetch one with :meth:`get`.

        Args:
            scope: The session.
            limit: Page size (1-10000).
            after: The last checkpoint of the previous page (the object, or its
                id). By id, its position is looked up; if it was deleted in
                between the page is empty, so prefer passing the object.
            with_data: Include each checkpoint's data.
            conn: A connection of your own to run on.
        """
        scope = _session_scope(scope)
        limit = validate_limit(limit, "limit", MAX_PAGE)
        params = Params()
        scope_sql = scope_condition(scope, "exact", params)
        cursor: tuple[str, str] | None = None
        cursor_id: tuple[str, str] | None = None
        if isinstance(after, Checkpoint):
            cursor = (params.add(after.created_at), params.add(after.id))
        elif after is not None:
            cursor_id = (params.add(scope.tenant), params.add(parse_id("after", after)))
        sql = q.list_page(
            self._schema,
            scope_sql,
            with_data=with_data,
            after=cursor,
            after_id=cursor_id,
            limit_param=params.add(limit),
        )
        rows = await self._read(
            conn, lambda active: active.fetch(sql, *params.values), tenant=scope.tenant
        )
        return [_from_row(row) for row in rows]

    async def delete(
        self,
        id: uuid.UUID | str,
        *,
        tenant: str | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> bool:
        """Delete a checkpoint. False if it did not exist."""
        checkpoint_id = parse_id("id", id)
        tenant = validate_tenant(tenant)
        tenant_param, args = self._by_id(checkpoint_id, tenant)
        sql = q.delete(self._schema, tenant_param)
        return await self._delete_one(sql, args, f"checkpoint {checkpoint_id}", conn, tenant=tenant)

    async def prune(
        self, scope: Scope, keep_last: int, *, conn: asyncpg.Connection | None = None
    ) -> int:
        """Delete all but the newest ``keep_last`` checkpoints of a session; returns how many.

        Takes the same session lock as :meth:`create`, so it never races one.
        ``keep_last=0`` deletes them all.
        """
        scope = _session_scope(scope)
        if isinstance(keep_last, bool) or not isinstance(keep_last, int):
            raise ValidationError("keep_last", "must be an integer")
        if not 0 <= keep_last <= MAX_KEEP:
            raise ValidationError("keep_last", f"must be between 0 and {MAX_KEEP}")
        params = Params(scope.tenant)
        scope_sql = scope_condition(scope, "exact", params)
        sql = q.prune(self._schema, scope_sql, params.add(keep_last))
        key = self._session_key(scope)

        async def attempt() -> int:
            async with self._transaction(conn, tenant=scope.tenant) as active:
                await active.execute(q.lock_session(), key)
                deleted: int = await active.fetchval(sql, *params.values)
            return deleted

        return await self._retrying(attempt, owns_transaction=conn is None)
