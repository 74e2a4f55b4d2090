"""Doctor's checks of the change feed: its epoch, and what holds it back.

- ``change feed epoch``: the cluster the feed's epoch was recorded in is the
  one the database lives in. After a restore into another cluster it is not
  (a warning: the feed's next read starts a new epoch, rewriting change
  keys while writes wait); ``repair`` starts the epoch now. See
  :mod:`memsvc.changes.epochs`.
- ``change feed``: no open transaction holds the feed back. One holding it
  for ``change_stall_report_s`` or longer is a problem when committed changes
  wait behind it (a warning while none do yet), named with its pid or
  prepared transaction and the fix. See :mod:`memsvc.changes.stalls`.
"""

from __future__ import annotations

import asyncpg

from memsvc.changes import queries as change_queries
from memsvc.changes.epochs import FeedEpoch, current_epoch
from memsvc.changes.stalls import find_holder
from memsvc.core.errors import MemsvcError
from memsvc.core.settings import Settings
from memsvc.db.cluster import citus_installed
from memsvc.db.errors import translate_errors
from memsvc.ops.doctor_report import DoctorReport


async def check_feed_epoch(
    conn: asyncpg.Connection, schema: str, report: DoctorReport, repair: bool
) -> None:
    """Whether the feed's recorded epoch belongs to the live cluster (see module docstring)."""
    row = await conn.fetchrow(change_queries.recorded_epoch(schema))
    if not row["recorded"]:
        report.add(
            "change feed epoch",
            "warning",
            "no epoch recorded (the change feed's first read records one)",
        )
        return
    epoch = FeedEpoch.parse(row["recorded"])
    if epoch.system_identifier == row["system_identifier"]:
        report.add(
            "change feed epoch",
            "ok",
            f"{epoch.describe()}, in this cluster (system identifier {epoch.system_identifier})",
        )
        return
    check = report.add(
        "change feed epoch",
        "warning",
        f"this database was restored into another PostgreSQL cluster (system identifier "
        f"{row['system_identifier']}; the feed's {epoch.describe()} was recorded in "
        f"{epoch.system_identifier}): the change feed's next read starts epoch "
        f"{epoch.number + 1}, lowering the change keys of rows written before the move "
        "(writes wait meanwhile), and cursors from before get FeedEpochError saying how to "
        "resume. Run `memsvc doctor --repair` to start it now",
    )
    if not repair:
        return
    try:
        with translate_errors():
            started = await current_epoch(conn, schema)
    except MemsvcError as exc:
        check.fixes.append(f"starting the new epoch failed: {exc}")
        check.status = "problem"
        return
    rewritten = "rewrote the ledgers' change keys" if started.keys_rewritten else "no key rewritten"
    check.fixes.append(f"started change feed epoch {started.number} ({rewritten})")
    check.status = "repaired"


async def check_feed_stall(
    conn: asyncpg.Connection, settings: Settings, report: DoctorReport
) -> None:
    """Whether an open transaction holds the feed back, and for how long (see module docstring)."""
    if await citus_installed(conn):
        # Each tenant's feed waits only on the transactions of the worker
        # holding its shards: the coordinator's own say nothing about it.
        report.add(
            "change feed",
            "ok",
            "Citus: each tenant's feed waits on its own worker's transactions (not checked "
            "from the coordinator)",
        )
        return
    holder = await find_holder(conn, settings.db_schema)
    if holder is None:
        report.add("change feed", "ok", "not held back: every committed change can be delivered")
        return
    held_for = holder.held_for_s or 0.0
    if held_for < settings.change_stall_report_s:
        report.add(
            "change feed",
            "ok",
            f"{holder.label} holds it back for now (open {held_for:.1f} s, under "
            f"change_stall_report_s={settings.change_stall_report_s:g})",
        )
        return
    report.add(
        "change feed",
        "problem" if holder.waiting else "warning",
        f"{holder.describe()}. Fix: {holder.fix()}",
    )
