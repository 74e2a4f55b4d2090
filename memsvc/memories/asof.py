"""As-of reads: memories as they were committed at a past moment.

:class:`AsOfReads` runs the statements of
:mod:`memsvc.memories.asof_queries` for
:class:`memsvc.memories.repository.MemoryRepository` (``get``,
``get_many``, ``get_by_key``, ``list`` and ``count`` with ``as_of=``) and
interprets their guard row.

Why commit timestamps: ``memory_events.at`` is ``now()``, the start of the
writing transaction. A transaction that started before ``t`` and committed
after it was not visible at ``t``, yet its ``at`` says otherwise; ordering by
``at`` would show it. PostgreSQL records each transaction's commit time when
``track_commit_timestamp`` is on (the embedded server and memsvc's test
servers turn it on), so the reads place each change at its commit, and gc
persists those times in ``memory_events.committed_at`` before the server
forgets them (it truncates them with the commit log, for frozen
transactions). One kind of event carries its time from the start: the
deletion of a memory already expired when its transaction began (gc's
expired batches) is placed at that start, which no read can tell from the
commit (see ``DELETED_COMMITTED_AT`` in the memory queries).

As-of reads run on the primary, never on a read replica: a replica that has
not replayed up to ``t`` would leave out commits at or before it, and it
cannot see the primary's transactions still becoming visible.

On Citus each statement names one tenant and filters every table it reads
by it, so Citus routes it whole to the node holding the tenant's shards
(guard included: the snapshot and commit times checked are that node's);
a read by id without a tenant runs once per tenant holding the ids.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg

from memsvc.core.errors import ConcurrencyError, StorageError, ValidationError
from memsvc.core.scope import Include, Scope
from memsvc.core.time_limits import validate_time
from memsvc.db.sql import Params, scope_condition
from memsvc.memories import asof_queries as q
from memsvc.memories.queries import valid_at
from memsvc.memories.validity import Validity

# Every memory, whatever its validity.
ALL: Validity = ("all", None)

# Reads again when a commit at or before t was not yet visible to the
# snapshot (a window of microseconds to a WAL flush); these many times.
ATTEMPTS = 5
# Waits for commits at or before t to become visible, about 1.5 s in all.
SETTLE_ATTEMPTS = 12
# The SQLSTATE pg_xact_commit_timestamp raises with the setting off.
NOT_TRACKING = "55000"

TRACKING_OFF = (
    "as_of reads need the PostgreSQL setting track_commit_timestamp = on (it takes effect "
    "at server restart; the embedded server sets it itself)"
)


def validate_as_of(value: object) -> datetime:
    """``as_of`` must be a timezone-aware datetime in the accepted range (see time_limits)."""
    return validate_time(value, "as_of")


def by_ids_statement(
    schema: str, ids: list[Any], tenant: str | None, moment: datetime
) -> tuple[str, list[object]]:
    """The statement (and values) of the memories ``ids`` at ``moment``, optionally in a tenant."""
    values: list[object] = [ids, moment]
    if tenant is not None:
        values.append(tenant)
    return q.by_ids(schema, None if tenant is None else "$3"), values


def tenants_of_ids(schema: str) -> str:
    """The statement of the tenants holding a row or an event of the memories ``$1``."""
    return q.tenants_of_ids(schema)


def _validity_at(validity: Validity, t_param: str, params: Params) -> str:
    """The validity condition of an as-of read: ``"now"`` is the ``as_of`` moment."""
    if validity[0] == "now":
        return " AND " + valid_at(t_param)
    return "" if validity[0] == "all" else " AND " + valid_at(params.add(validity[1]))


def count_statement(
    schema: str, scope: Scope, include: Include, moment: datetime, validity: Validity = ALL
) -> tuple[str, list[object]]:
    """The statement (and values) counting a scope's memories at ``moment``."""
    params = Params(scope.tenant, moment)
    scope_sql = scope_condition(scope, include, params)
    row_scope_sql = scope_condition(scope, include, params, alias="m")
    scope_sql += _validity_at(validity, "$2", params)
    return q.count_in_scope(schema, "$1", scope_sql, row_scope_sql, "$2"), params.values


def in_scope_statement(
    schema: str,
    scope: Scope,
    include: Include,
    moment: datetime,
    *,
    key: str | None = None,
    after: Any = None,
    limit: int | None = None,
    validity: Validity = ALL,
) -> tuple[str, list[object]]:
    """The statement (and values) of a scope's memories at ``moment``, in id order.

    Under a ``key``, or a page (``limit`` rows after the id ``after``), of
    the memories valid as asked (``"now"``: at ``moment``).
    """
    params = Params()
    tenant_param, t_param = params.add(scope.tenant), params.add(moment)
    scope_sql = scope_condition(scope, include, params)
    row_scope_sql = scope_condition(scope, include, params, alias="m")
    scope_sql += _validity_at(validity, t_param, params)
    sql = q.in_scope(
        schema,
        tenant_param,
        scope_sql,
        row_scope_sql,
        t_param,
        key_param=None if key is None else params.add(key),
        after_param=None if after is None else params.add(after),
        limit_param=None if limit is None else params.add(limit),
    )
    return sql, params.values


class AsOfReads:
    """Runs as-of statements and checks their guard (future, horizon, unseen commits)."""

    def __init__(self) -> None:
        # The setting only changes at a server restart; once seen on, a
        # restart turning it off still surfaces as NOT_TRACKING below.
        self._tracking_seen = False

    async def _check_tracking(self, conn: asyncpg.Connection) -> None:
        if self._tracking_seen:
            return
        if not await conn.fetchval(q.SHOW_TRACKING):
            raise StorageError(TRACKING_OFF, sqlstate=NOT_TRACKING)
        self._tracking_seen = True

    async def _settle(self, conn: asyncpg.Connection, as_of: datetime) -> None:
        """Wait until every transaction that committed at or before ``as_of`` is visible."""
        for attempt in range(SETTLE_ATTEMPTS):
            if conn.is_in_transaction():
                await conn.execute(q.CLEAR_STATS_SNAPSHOT)
            row = await conn.fetchrow(q.SETTLING, as_of)
            assert row is not None
            if not row["settling"]:
                return
            if not row["fresh_snapshot"]:
                break  # the caller's snapshot is taken: waiting cannot help
            await asyncio.sleep(min(0.2, 0.005 * 2**attempt))
        raise ConcurrencyError(
            "a transaction that committed at or before as_of is still invisible (its commit "
            "is being flushed or waits for a synchronous standby); read again"
        )

    async def fetch(
        self, conn: asyncpg.Connection, sql: str, args: Sequence[object], as_of: datetime
    ) -> list[Any]:
        """Rows of an as-of statement (guard columns first); raises on a refused moment."""
        await self._check_tracking(conn)
        await self._settle(conn, as_of)
        for attempt in range(ATTEMPTS):
            try:
                rows: list[Any] = await conn.fetch(sql, *args)
            except asyncpg.ObjectNotInPrerequisiteStateError as exc:
                self._tracking_seen = False
                raise StorageError(TRACKING_OFF, sqlstate=NOT_TRACKING) from exc
            guard = rows[0]
            if guard["future"]:
                raise ValidationError(
                    "as_of", f"{as_of.isoformat()} is in the future (later than the read)"
                )
            if guard["too_old"]:
                raise ValidationError(
                    "as_of",
                    f"{as_of.isoformat()} is before the history horizon {guard['horizon']}: "
                    "history older than that has been removed",
                )
            if not guard["missed"]:
                return rows
            await asyncio.sleep(0.001 * 2**attempt)
        raise ConcurrencyError(
            "a transaction that committed at or before as_of stayed invisible to the read's "
            "snapshot; read again (in a new transaction)"
        )
