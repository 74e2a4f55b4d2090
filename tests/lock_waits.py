"""Test helpers: waiting until a statement blocks on a lock, and killing the process that runs it.

Crash tests hold a row lock in one connection, start a child process that
will block on it at a known point, and SIGKILL the child there: the crash
lands exactly between two steps of the code under test.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys

import asyncpg

WAITING_FOR_A_LOCK = (
    "SELECT count(*) FROM pg_stat_activity "
    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
)


async def kill_when_it_waits_for_a_lock(
    watcher: asyncpg.Connection, code: str, *args: str, what: str = "the child"
) -> None:
    """Run ``python -c code *args``; SIGKILL it once a session of the database waits for a lock.

    Fails if the child ends before that, or nothing waits within two minutes.
    """
    child = subprocess.Popen([sys.executable, "-c", code, *args])
    try:
        async with asyncio.timeout(120):
            while not await watcher.fetchval(WAITING_FOR_A_LOCK):
                assert child.poll() is None, f"{what} ended before it reached the lock"
                await asyncio.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        assert await asyncio.to_thread(child.wait) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
