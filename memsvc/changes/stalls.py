"""When the change feed is held back, and by whom.

The feed delivers an event only once every transaction that could still
write one before it has ended (its watermark, see
:mod:`memsvc.changes.queries`). One transaction left open holds
every later event back, of every tenant, until it ends; an orphaned prepared
transaction, until someone commits or rolls it back. What memsvc does:

- **Bounded where PostgreSQL allows it.** Once the plain watermark (the
  oldest transaction running anywhere on the server) has not moved for
  :data:`REFINE_AFTER_S` while events wait, the feed reads with the refined
  watermark, which leaves out transactions of other databases and prepared
  transactions holding no lock on the ledgers: none of them can write an
  event here. A transaction of this database that has written (it has an
  id) can still write an event at any moment, so it holds the feed back.
- **Reported.** A feed held back behind one transaction for
  ``Settings.change_stall_report_s`` logs a warning naming the holder (its
  pid, or the prepared transaction's gid) and the fix, and shows in the
  ``memsvc.changes.stalled`` gauge; ``memsvc doctor`` reports it too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import asyncpg

from memsvc.changes import queries as q

# The plain watermark must stay put this long, with events waiting, before
# reads use the refined one (which reads pg_stat_activity and the prepared
# transactions on every read until the plain watermark moves again).
REFINE_AFTER_S = 0.25
# Events counted behind the holder, at most (a report, not an inventory).
MAX_WAITING_COUNTED = 10_000


@dataclass(frozen=True)
class WatermarkHolder:
    """The transaction holding the feed's watermark back."""

    watermark: str
    pid: int | None
    database: str | None
    user: str | None
    application: str | None
    state: str | None
    query: str | None
    gid: str | None  # for a prepared transaction
    prepared_in: str | None
    held_for_s: float | None
    waiting: int  # committed events waiting behind it (up to MAX_WAITING_COUNTED per ledger)

    @property
    def label(self) -> str:
        """Short: ``pid 4242``, ``prepared transaction 'gid'`` or ``transaction 755``."""
        if self.pid is not None:
            return f"pid {self.pid}"
        if self.gid is not None:
            return f"prepared transaction {self.gid!r}"
        return f"transaction {self.watermark}"

    def describe(self) -> str:
        """Who holds the feed back, for how long, and what waits behind it."""
        since = "" if self.held_for_s is None else f", open for {self.held_for_s:.0f} s"
        if self.pid is not None:
            who = (
                f"session pid {self.pid} (database {self.database}, user {self.user}, "
                f"application {self.application or '-'}, {self.state or 'state hidden'}{since}"
                + (f", last query {self.query!r}" if self.query else "")
                + ")"
            )
        elif self.gid is not None:
            who = f"prepared transaction {self.gid!r} (database {self.prepared_in}{since})"
        else:
            who = f"transaction {self.watermark} (no session found: it may just have ended)"
        return (
            f"{who} holds the change feed back: {self.waiting} committed events wait behind "
            "it, and every later one will until it ends"
        )

    def fix(self) -> str:
        """What ends the hold."""
        if self.pid is not None:
            return (
                "have that session commit or roll back, or end it with "
                f"SELECT pg_terminate_backend({self.pid})"
            )
        if self.gid is not None:
            return (
                f"in database {self.prepared_in}, run COMMIT PREPARED '{self.gid}' or "
                f"ROLLBACK PREPARED '{self.gid}' (whichever its coordinator meant)"
            )
        return "look again: the transaction may have ended"


async def find_holder(conn: asyncpg.Connection, schema: str) -> WatermarkHolder | None:
    """The transaction holding the watermark back, or None when none does."""
    row = await conn.fetchrow(q.watermark_holder(schema), MAX_WAITING_COUNTED)
    if row is None or not row["held"]:
        return None
    return WatermarkHolder(
        watermark=row["watermark"],
        pid=row["pid"],
        database=row["datname"],
        user=row["usename"],
        application=row["application_name"],
        state=row["state"],
        query=row["query"],
        gid=row["gid"],
        prepared_in=row["prepared_in"],
        held_for_s=row["held_for_s"],
        waiting=int(row["waiting"]),
    )


class StallWatch:
    """What one feed has seen of its watermark: when to refine it, when to report a stall.

    Times are ``time.monotonic()`` seconds.
    """

    def __init__(self, report_after_s: float) -> None:
        self.report_after_s = report_after_s
        self.refined = False
        self._plain: str | None = None
        self._plain_since = 0.0
        self._refined_from: str | None = None
        self._watermark: str | None = None
        self.held_since: float | None = None
        self._reported_at: float | None = None

    def saw(self, watermark: str, snapshot_xmin: str, held_back: bool) -> None:
        """Note one read: its watermark, the plain one, and whether events wait behind it."""
        now = time.monotonic()
        if snapshot_xmin != self._plain:
            self._plain, self._plain_since = snapshot_xmin, now
        if self.refined and snapshot_xmin != self._refined_from:
            self.refined = False  # what held the plain watermark has ended
        elif not self.refined and held_back and now - self._plain_since >= REFINE_AFTER_S:
            self.refined, self._refined_from = True, snapshot_xmin
        if not held_back:
            self._watermark = self.held_since = None
        elif watermark != self._watermark:
            self._watermark, self.held_since = watermark, now

    @property
    def stalled(self) -> bool:
        """Held back behind one transaction for at least ``report_after_s``."""
        return (
            self.held_since is not None
            and time.monotonic() - self.held_since >= self.report_after_s
        )

    def report_due(self) -> bool:
        """Stalled, and not reported in the last ``report_after_s``."""
        now = time.monotonic()
        if not self.stalled:
            return False
        return self._reported_at is None or now - self._reported_at >= self.report_after_s

    def reported(self) -> None:
        """A report was made now."""
        self._reported_at = time.monotonic()

    def resumed(self) -> bool:
        """True once after reported stall ends (to say so)."""
        if self._reported_at is None or self.stalled:
            return False
        self._reported_at = None
        return True

