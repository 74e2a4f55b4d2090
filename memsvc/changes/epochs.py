"""Epochs of the change feed: the cluster whose transaction ids the feed's positions count.

Feed positions are transaction ids of the cluster the database lives in. A
database restored into another cluster keeps its recorded ids while the new
cluster counts from its own, so a position from before the move means
nothing after it. The feed's epoch names the cluster (its
``pg_control_system()`` system identifier, set by initdb and shared by
physical replicas, so a failover keeps the epoch): every cursor carries the
epoch's id, and a cursor of another epoch raises :class:`FeedEpochError`
saying how to resume, never resuming at a position that would skip changes.

The database records the epoch in ``schema_info`` (migration 0023, which
also defines ``change_feed_epoch()``, the server-side function that starts a
new epoch when the recorded cluster is not the live one). Every read of the
feed returns the recorded epoch and the live system identifier, so a feed
whose database moves under it (a pool reconnecting to a restored copy behind
the same address) stops at its next read.

Cursors: ``c2.<epoch id>.<change key>.<source>.<event id>``. Cursors written
before epochs existed (``c1.<change key>.<source>.<event id>``) belong to the
first epoch.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from memsvc.changes import queries as q
from memsvc.core.errors import FeedEpochError, ValidationError

_CURSOR = re.compile(r"^c2\.([0-9a-f]{1,32})\.(\d{1,20})\.(-1|0|1)\.(\d{1,19})$")
_LEGACY_CURSOR = re.compile(r"^c1\.(\d{1,20})\.(-1|0|1)\.(\d{1,19})$")

RESUME_ADVICE = (
    "resume with changes(since=<datetime>), the `at` of the last change you processed less "
    "the longest your writing transactions run (every change from then on, some again), or "
    "with changes(since=None) (every change still retained)"
)


@dataclass(frozen=True)
class FeedEpoch:
    """One epoch of the feed, as ``schema_info`` records it."""

    id: str
    number: int
    system_identifier: str
    started_at: datetime
    legacy_cursors: bool  # whether cursors from before epochs (c1) belong to it
    keys_rewritten: bool  # whether starting it rewrote the ledgers' keys
    recorded: str  # the recorded text, compared on every read

    @classmethod
    def parse(cls, text: str) -> FeedEpoch:
        """Read the recorded JSON."""
        data = json.loads(text)
        return cls(
            id=data["id"],
            number=int(data["number"]),
            system_identifier=data["system_identifier"],
            started_at=datetime.fromisoformat(data["started_at"]),
            legacy_cursors=bool(data.get("legacy_cursors", False)),
            keys_rewritten=bool(data.get("keys_rewritten", False)),
            recorded=text,
        )

    def describe(self) -> str:
        """For people: ``epoch 2 (since 2026-11-27 06:20:03 UTC)``."""
        return f"epoch {self.number} (since {self.started_at:%Y-%m-%d %H:%M:%S %Z})"

    def still_current(self, recorded: str | None, system_identifier: str | None) -> bool:
        """Whether a read's recorded epoch and live cluster are still this epoch's."""
        return recorded == self.recorded and system_identifier == self.system_identifier


async def current_epoch(conn: asyncpg.Connection, schema: str) -> FeedEpoch:
    """The feed's epoch, a new one started first if the database now lives in another cluster."""
    return FeedEpoch.parse(await conn.fetchval(q.current_epoch(schema)))


def cursor_text(epoch: FeedEpoch, key: int, source: int, event_id: int) -> str:
    """The cursor of a position in ``epoch``."""
    return f"c2.{epoch.id}.{key}.{source}.{event_id}"


def parse_cursor(text: str) -> tuple[str | None, int, int, int]:
    """(epoch id or None for a cursor from before epochs, key, source, event id).

    A ValidationError naming ``since`` when it is not a cursor.
    """
    match = _CURSOR.match(text)
    if match is not None:
        return match[1], int(match[2]), int(match[3]), int(match[4])
    legacy = _LEGACY_CURSOR.match(text)
    if legacy is not None:
        return None, int(legacy[1]), int(legacy[2]), int(legacy[3])
    raise ValidationError(
        "since",
        'must be a cursor from Change.cursor, "now", a datetime, or None (the oldest retained)',
    )


def check_cursor_epoch(cursor: str, cursor_epoch: str | None, epoch: FeedEpoch) -> None:
    """Raise FeedEpochError unless a cursor of ``cursor_epoch`` may resume in ``epoch``."""
    if cursor_epoch == epoch.id or (cursor_epoch is None and epoch.legacy_cursors):
        return
    raise epoch_error(cursor, cursor_epoch, epoch)


def epoch_error(cursor: str, cursor_epoch: str | None, epoch: FeedEpoch) -> FeedEpochError:
    """The error for a position of ``cursor_epoch`` (None: from before epochs) in ``epoch``."""
    named = "from before feed epochs" if cursor_epoch is None else f"epoch {cursor_epoch}"
    return FeedEpochError(
        f"change feed cursor {cursor} belongs to feed {named}, but the database "
        f"has been in {epoch.describe()}, id {epoch.id}: it was restored into another "
        "PostgreSQL cluster, whose transaction ids, which order the feed, count afresh, and "
        f"positions of one epoch mean nothing in another. To not miss a change, {RESUME_ADVICE}",
        cursor_epoch=cursor_epoch,
        current_epoch=epoch.id,
        epoch_started_at=epoch.started_at,
    )
