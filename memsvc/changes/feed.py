"""The change feed: every committed change to memories, assemblies and checkpoints.

Events come from the ledgers the writes fill in their own statements
(``memory_events``; ``entity_events`` by trigger), read in the order of
their ``change_key`` and only below the oldest transaction still running
(see :mod:`memsvc.changes.queries`). A position read past can
never gain an event later, so a consumer resuming from the cursor of the
last change it processed sees every committed change exactly once, however
transactions interleave and in whatever order they commit.

New events wake consumers through ``LISTEN memsvc_changes`` on a direct
connection (``Settings.listen_url``, else the database URL unless it goes
through pgbouncer in transaction mode); the ledgers are the truth, and the
feed also reads every ``change_poll_interval_s`` without a wake-up.

Positions count in the transaction ids of one cluster: cursors name the
feed's epoch (:mod:`memsvc.changes.epochs`). A transaction left
open holds the feed back; what is bounded and what is reported is in
:mod:`memsvc.changes.stalls`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import asyncpg

from memsvc import telemetry
from memsvc.changes import queries as q
from memsvc.changes.epochs import (
    FeedEpoch,
    check_cursor_epoch,
    current_epoch,
    cursor_text,
    epoch_error,
    parse_cursor,
)
from memsvc.changes.signal import CHANNEL
from memsvc.changes.stalls import StallWatch, find_holder
from memsvc.core.errors import (
    CitusUnsupportedError,
    ConcurrencyError,
    CursorExpiredError,
    MemsvcError,
    ValidationError,
)
from memsvc.core.models import Change
from memsvc.core.scope import Include, Scope, validate_include
from memsvc.core.settings import Settings
from memsvc.db.errors import translate_errors
from memsvc.db.pool import connect
from memsvc.db.repository import Repository
from memsvc.db.sql import Params, scope_condition

log = logging.getLogger(__name__)

DEFAULT_BATCH = 500
MAX_BATCH = 10_000
# While events wait behind a running transaction, look again this soon: the
# transaction holding them back may end without writing (hence without a
# notification). The wait doubles up to change_poll_interval_s.
HELD_BACK_WAIT_S = 0.02
# Reads start at least this far apart: under a stream of writes, each read
# then takes what several wake-ups announced (fewer round trips for the
# consumer, a few milliseconds more latency).
MIN_READ_INTERVAL_S = 0.01
# Starting an epoch locks the keyed tables; a writer locking them in another
# order may deadlock with it (PostgreSQL then cancels one of the two).
EPOCH_ATTEMPTS = 3
# Positions as gc's horizon records them (cursors add the epoch: memsvc.changes.epochs).
_POSITION = re.compile(r"^c1\.(\d{1,20})\.(-1|0|1)\.(\d{1,19})$")
_BIGINT_MAX = 2**63 - 1
_FEED_IDS = itertools.count(1)


class Position(NamedTuple):
    """A place in the feed, between events: (change key, source, event id).

    Source -1 stands before every event of its key (``since="now"``).
    """

    key: int
    source: int
    event_id: int

    def cursor(self) -> str:
        """This position as text (gc's horizon; a consumer's cursor adds the epoch)."""
        return f"c1.{self.key}.{self.source}.{self.event_id}"

    def bound(self, source: int) -> int:
        """The last event id of ``source`` at this key that lies at or before the position."""
        if source > self.source:
            return -1
        if source == self.source:
            return self.event_id
        return _BIGINT_MAX

    @classmethod
    def parse(cls, text: str, field: str = "horizon") -> Position:
        """Read :meth:`cursor` text back (ValidationError naming ``field`` when malformed)."""
        match = _POSITION.match(text)
        if match is None:
            raise ValidationError(field, "must be a position of the change feed")
        return cls(int(match[1]), int(match[2]), int(match[3]))


START = Position(0, -1, 0)
# After every event: a read from here finds none, and returns the watermark.
END = Position(2**64 - 1, 1, _BIGINT_MAX)


class ChangeFeed(Repository):
    """Reads the change feed; see the module docstring."""

    def __init__(self, pool: asyncpg.Pool, settings: Settings, *, dsn: str) -> None:
        super().__init__(pool, settings)
        self._dsn = dsn

    def changes(
        self,
        scope: Scope | None = None,
        *,
        include: Include = "descendants",
        since: str | datetime | None = None,
        with_values: bool = False,
        batch_size: int = DEFAULT_BATCH,
    ) -> AsyncIterator[Change]:
        """Every committed change in ``scope``, oldest first, then new ones as they commit.

        Args:
            scope: Whose changes (None: every scope).
            include: ``"descendants"`` (the scope and everything under it),
                ``"exact"`` or ``"ancestors"``.
            since: A ``Change.cursor`` (resume after that change), ``"now"``
                (changes committing after the iterator is first advanced; one
                committed a moment before may be included, none is skipped),
                a timezone-aware datetime (every change whose transaction
                started at or after it, and everything after the first of
                them in feed order: some earlier ones come too), or None
                (from the oldest change still retained).
            with_values: Also fetch the values after each change (``Change.values``).
            batch_size: Changes read per round trip (1-10000).

        The iterator never ends on its own; stop iterating (or cancel the
        task) when done. Each memory's (assembly's) changes arrive in version
        order. Raises CursorExpiredError when gc removed changes after
        ``since`` (see ``Settings.change_retention_days``), and its subclass
        FeedEpochError when ``since`` is a cursor from before the database
        was restored into another cluster (the error says how to resume).
        """
        if scope is not None and not isinstance(scope, Scope):
            raise ValidationError("scope", "must be a Scope or None")
        include = validate_include(include)
        _validate_since(since)
        if not isinstance(with_values, bool):
            raise ValidationError("with_values", "must be a bool")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int):
            raise ValidationError("batch_size", "must be an integer")
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValidationError("batch_size", f"must be between 1 and {MAX_BATCH}")
        tenant = scope.tenant if scope is not None else None
        if self._settings.row_level_security and tenant is None:
            raise ValidationError("scope", "row_level_security is on: pass the scope to follow")
        plain, args = read_statement(
            self._schema, scope, include, with_values=with_values, batch_size=batch_size
        )
        refined, _ = read_statement(
            self._schema, scope, include, with_values=with_values, batch_size=batch_size,
            refined=True,
        )
        return self._follow((plain, refined), args, since, tenant=tenant)

    async def _follow(
        self,
        statements: tuple[str, str],
        args: list[Any],
        since: str | datetime | None,
        *,
        tenant: str | None,
    ) -> AsyncIterator[Change]:
        wake = asyncio.Event()
        listener = await self._listen(wake)
        watch = StallWatch(self._settings.change_stall_report_s)
        feed_id = next(_FEED_IDS)
        try:
            citus = await self._on_citus()
            if citus:
                _check_citus_feed(tenant, since)
                # A tenant's read is routed to the node holding its shards:
                # its keys and its watermark are that node's. The system
                # identifier it reads is that node's too, not the cluster's.
                # Only the plain watermark: every distributed write commits
                # in two phases, and the refined one cannot tell a worker's
                # prepared transaction holding a ledger's shard from an
                # unrelated one.
                statements = (statements[0], statements[0])
            epoch, position = await self._start(since, tenant, statements[0] if citus else None,
                                                args)
            wait = HELD_BACK_WAIT_S
            loop = asyncio.get_running_loop()
            last_read = 0.0
            while True:
                pause = last_read + MIN_READ_INTERVAL_S - loop.time()
                if pause > 0:
                    await asyncio.sleep(pause)
                wake.clear()
                last_read = loop.time()
                sql = statements[1] if watch.refined else statements[0]
                rows = await self._read_batch(sql, args, position, tenant)
                head = rows[0]
                system_identifier = epoch.system_identifier if citus else head["system_identifier"]
                if not epoch.still_current(head["epoch"], system_identifier):
                    epoch = await self._epoch_after_move(epoch, position, tenant)
                    continue
                if head["horizon"] and Position.parse(head["horizon"]) > position:
                    raise CursorExpiredError(
                        f"changes after cursor {_cursor(epoch, position)} were removed by gc "
                        f"(it kept changes after {head['horizon']}): rebuild the consumer's "
                        'state from the current data, then follow changes(since="now")'
                    )
                found = [row for row in rows if row["event_id"] is not None]
                for row in found:
                    position = Position(int(row["change_key"]), row["source"], row["event_id"])
                    yield _change(row, _cursor(epoch, position))
                watch.saw(head["watermark"], head["snapshot_xmin"], bool(head["held_back"]))
                await self._report_stall(watch, feed_id, tenant)
                if len(found) == args[-1]:
                    continue  # a full batch: more may be waiting
                if found:
                    wait = HELD_BACK_WAIT_S
                timeout = self._settings.change_poll_interval_s
                if head["held_back"]:
                    timeout = min(timeout, wait)
                    wait = min(wait * 2, self._settings.change_poll_interval_s)
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for can
                # swallow a cancellation that lands as the wake-up arrives,
                # and a cancelled consumer would then follow the feed for ever.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await wake.wait()
        finally:
            telemetry.feed_resumed(feed_id)
            if listener is not None:
                await _close_quietly(listener)

    async def _start(
        self,
        since: str | datetime | None,
        tenant: str | None,
        routed_read: str | None,
        args: list[Any],
    ) -> tuple[FeedEpoch, Position]:
        """The feed's epoch, and the position it starts after.

        ``routed_read`` (on Citus): the feed's own read, whose watermark is the
        one of the node holding the tenant's events; ``since="now"`` starts there.
        """
        epoch = await self._epoch(tenant)
        if since == "now" and routed_read is not None:
            rows = await self._read_batch(routed_read, args, END, tenant)
            return epoch, Position(int(rows[0]["watermark"]), -1, 0)
        async with self._connection(tenant=tenant, writes=False) as conn:
            if since == "now":
                watermark = await conn.fetchval(q.refined_watermark_now(self._schema))
                return epoch, Position(int(watermark), -1, 0)
            if isinstance(since, datetime):
                first = await conn.fetchrow(q.first_since(self._schema), since)
            else:
                horizon_text = await conn.fetchval(q.horizon(self._schema))
        if isinstance(since, datetime):
            return epoch, self._position_since(first, since)
        if since is None:
            return epoch, Position.parse(horizon_text) if horizon_text else START
        cursor_epoch, key, source, event_id = parse_cursor(since)
        check_cursor_epoch(since, cursor_epoch, epoch)
        return epoch, Position(key, source, event_id)

    async def _epoch(self, tenant: str | None) -> FeedEpoch:
        """The current epoch (a new one started first if the database moved cluster)."""
        for attempt in range(1, EPOCH_ATTEMPTS + 1):
            try:
                async with self._connection(tenant=tenant, writes=False) as conn:
                    return await current_epoch(conn, self._schema)
            except ConcurrencyError:
                if attempt == EPOCH_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    async def _epoch_after_move(
        self, epoch: FeedEpoch, position: Position, tenant: str | None
    ) -> FeedEpoch:
        """A read found the epoch record or the cluster changed: the epoch to go on in.

        FeedEpochError when it is not the feed's own: the position means
        nothing in it.
        """
        current = await self._epoch(tenant)
        if current.id != epoch.id:
            raise epoch_error(_cursor(epoch, position), epoch.id, current)
        return current

    def _position_since(self, first: asyncpg.Record, since: datetime) -> Position:
        """Where a feed ``since`` a time starts: before the first change since then.

        Or at the watermark, if that is earlier: a transaction still running
        may have started after ``since`` and commit an event below the first
        one found.
        """
        start = Position(int(first["watermark"]), -1, 0)
        if first["change_key"] is not None:
            found = Position(int(first["change_key"]), first["source"], first["event_id"] - 1)
            start = min(start, found)
        retention = self._settings.change_retention_days
        if first["horizon"] and (
            retention is None or since <= datetime.now(UTC) - timedelta(days=retention)
        ):
            # gc removes changes older than the retention: among them some may
            # have started after `since`.
            raise CursorExpiredError(
                f"gc removed changes older than the retention period, and changes since "
                f"{since.isoformat()} may be among them: pass a later time, or rebuild the "
                'consumer\'s state from the current data and follow changes(since="now")'
            )
        return start

    async def _report_stall(self, watch: StallWatch, feed_id: int, tenant: str | None) -> None:
        """Log and gauge a feed held back for change_stall_report_s; say when it resumes."""
        if watch.resumed():
            log.info("change feed: no longer held back")
            telemetry.feed_resumed(feed_id)
            return
        if not watch.report_due() or watch.held_since is None:
            return
        watch.reported()
        try:
            async with self._connection(tenant=tenant, writes=False) as conn:
                holder = await find_holder(conn, self._schema)
        except MemsvcError as exc:
            log.warning("change feed held back; finding by what failed: %s", exc)
            return
        if holder is None:
            return  # it ended meanwhile
        log.warning(
            "change feed held back for over %g s: %s. Fix: %s",
            self._settings.change_stall_report_s,
            holder.describe(),
            holder.fix(),
        )
        telemetry.feed_stalled(
            feed_id, since=watch.held_since, schema=self._schema, holder=holder.label
        )

    async def _read_batch(
        self, sql: str, args: list[Any], position: Position, tenant: str | None
    ) -> list[asyncpg.Record]:
        values = read_arguments(args, position)
        async with self._connection(tenant=tenant, writes=False) as conn:
            rows: list[asyncpg.Record] = await conn.fetch(sql, *values)
        return rows

    async def _listen(self, wake: asyncio.Event) -> asyncpg.Connection | None:
        """A connection LISTENing for wake-ups, or None (then the feed polls)."""
        dsn = self._settings.listen_url
        if dsn is None:
            if self._settings.pgbouncer:
                return None  # LISTEN does not survive transaction pooling
            dsn = self._dsn

        def notified(*_: object) -> None:
            wake.set()

        try:
            conn = await connect(dsn, self._settings)
        except MemsvcError as exc:
            log.warning("change feed: cannot LISTEN (%s); polling instead", exc)
            return None
        try:
            with translate_errors():
                await conn.add_listener(CHANNEL, notified)
        except MemsvcError as exc:
            await _close_quietly(conn)
            log.warning("change feed: cannot LISTEN (%s); polling instead", exc)
            return None
        return conn


def read_statement(
    schema: str,
    scope: Scope | None,
    include: Include,
    *,
    with_values: bool,
    batch_size: int,
    refined: bool = False,
) -> tuple[str, list[Any]]:
    """The feed's read of the next batch, and its arguments (see :func:`read_arguments`).

    ``refined``: below the refined watermark (see :mod:`memsvc.changes.stalls`).
    """
    params = Params("0", -1, -1)
    scope_sql = "true" if scope is None else scope_condition(scope, include, params, "e")
    sql = q.read_batch(
        schema,
        scope_sql,
        with_values=with_values,
        limit_param=params.add(batch_size),
        refined=refined,
    )
    return sql, params.values


def read_arguments(args: list[Any], position: Position) -> list[Any]:
    """The arguments of a :func:`read_statement` reading after ``position``."""
    return [
        str(position.key),
        position.bound(q.MEMORY_SOURCE),
        position.bound(q.ENTITY_SOURCE),
        *args[3:],
    ]


async def _close_quietly(conn: asyncpg.Connection) -> None:
    # Closing politely needs the loop; when the consumer's task is being
    # torn down, dropping the socket is enough.
    try:
        async with asyncio.timeout(5):
            await conn.close()
    except Exception:
        conn.terminate()
    except BaseException:
        conn.terminate()
        raise


def _check_citus_feed(tenant: str | None, since: str | datetime | None) -> None:
    """CitusUnsupportedError for the feeds that cannot be exactly once on Citus.

    Each node keys its events with its own transaction ids and has its own
    watermark: only a feed whose events all live on one node (one tenant's:
    its shards are co-located) has one consistent order and bound.
    """
    if tenant is None:
        raise CitusUnsupportedError(
            "changes(scope=None)",
            "a feed of every tenant spans nodes whose change keys are not comparable; "
            "follow one feed per tenant (changes(Scope(tenant)))",
        )
    if isinstance(since, datetime):
        raise CitusUnsupportedError(
            "changes(since=<datetime>)",
            "finding the first change since a time reads every tenant's events; pass a "
            'cursor or "now"',
        )


def _validate_since(since: object) -> None:
    if since is None or since == "now":
        return
    if isinstance(since, datetime):
        if since.utcoffset() is None:
            raise ValidationError("since", "a datetime needs its time zone (as Change.at has)")
        return
    if not isinstance(since, str):
        raise ValidationError("since", 'must be a cursor string, "now", a datetime or None')
    parse_cursor(since)


def _cursor(epoch: FeedEpoch, position: Position) -> str:
    return cursor_text(epoch, position.key, position.source, position.event_id)


def _change(row: asyncpg.Record, cursor: str) -> Change:
    return Change(
        cursor=cursor,
        kind=row["kind"],
        memory_id=row["entity_id"],
        scope=Scope.trusted(
            row["tenant_id"], row["project_id"], row["agent_id"], row["session_id"]
        ),
        version=row["version"],
        at=row["at"],
        entity=row["entity"],
        values=row["values"],
    )
