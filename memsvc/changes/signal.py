"""Wake-ups for change feed consumers: ``NOTIFY memsvc_changes`` after memsvc's writes.

The NOTIFY is sent outside the writers' transactions, by one task per
service on a connection of its own, at most one at a time (signals arriving
meanwhile are folded into the next). A NOTIFY inside each writing
transaction would be simpler, but PostgreSQL serialises the commits of
notifying transactions behind one lock held across their WAL flush, which
would throttle every writer.

Wake-ups are also spaced at least ``NOTIFY_INTERVAL_S`` apart: consumers
read at most that often anyway (``memsvc.changes.feed.MIN_READ_INTERVAL_S``), and each
NOTIFY is a commit on the server plus a signal to every listening backend
and a message to every consumer: spacing them keeps that cost off writers
for a little delivery latency. The first write after a quiet spell is
signalled at once.

A wake-up is only a hint (the ledgers are the truth): one sent for a write
inside a caller's transaction may arrive before that commits, and writes
made by other means (SQL, gc, imports) send none; consumers then find the
change on their next poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

import asyncpg

from memsvc.core.errors import MemsvcError
from memsvc.core.settings import Settings
from memsvc.db.pool import connect

log = logging.getLogger(__name__)

CHANNEL = "memsvc_changes"
# See the module docstring: no faster than consumers read.
NOTIFY_INTERVAL_S = 0.01

P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C", bound=type)


class ChangeNotifier:
    """Sends the wake-up after writes; see the module docstring."""

    def __init__(self, dsn: str, settings: Settings) -> None:
        self._dsn = dsn
        self._settings = settings
        self._pending = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._conn: asyncpg.Connection | None = None
        self._closed = False

    def attach(self, *repositories: Any) -> None:
        """Have these repositories signal this notifier after their writes."""
        for repository in repositories:
            repository._change_listener = self.changed

    def changed(self) -> None:
        """Note that a write happened; a wake-up follows shortly."""
        if self._closed:
            return
        self._pending.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await self._pending.wait()
            self._pending.clear()
            try:
                if self._conn is None or self._conn.is_closed():
                    self._conn = await connect(self._dsn, self._settings)
                await self._conn.execute(
                    "SELECT pg_notify($1, $2)",
                    CHANNEL,
                    self._settings.db_schema,
                    timeout=self._settings.command_timeout_s,
                )
            except (MemsvcError, asyncpg.PostgresError, OSError) as exc:
                # Consumers still poll; try again with the next write.
                log.debug("change feed wake-up not sent: %s", exc)
                if self._conn is not None:
                    self._conn.terminate()
                    self._conn = None
            # Writes meanwhile set _pending again: one wake-up covers them all.
            await asyncio.sleep(NOTIFY_INTERVAL_S)

    async def close(self) -> None:
        """Stop sending wake-ups and close the connection."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()
            self._conn = None


def signals_changes(*names: str) -> Callable[[C], C]:
    """Make a repository's write methods call its change listener when they return."""

    def decorate(cls: C) -> C:
        for name in names:
            setattr(cls, name, _signalling(getattr(cls, name)))
        return cls

    return decorate


def _signalling(method: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        result = await method(*args, **kwargs)
        repository: Any = args[0]
        listener = repository._change_listener
        if listener is not None:
            listener()
        return result

    return wrapper
