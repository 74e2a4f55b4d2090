"""Backends terminated with pg_terminate_backend in the middle of a stream of calls.

Each call either succeeds or raises a typed memsvc error, never hangs, and an
acknowledged write is never lost.
"""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from memsvc import ConcurrencyError, Scope, StorageError
from memsvc.core.ids import new_id
from tests.reliability.checks import (
    WriteLedger,
    assert_every_row_has_its_created_event,
    assert_ledger_holds,
)
from tests.reliability.conftest import bounded

CALL_BOUND_S = 15.0
TERMINATION_ROUNDS = 40

TERMINATE_MEMSVC_BACKENDS = """
SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE application_name = 'memsvc' AND datname = current_database() AND pid <> pg_backend_pid()
"""


@pytest.mark.timeout(120)
async def test_terminated_backends_give_typed_errors_and_lose_no_acknowledged_write(
    open_service, admin: asyncpg.Connection
) -> None:
    scope = Scope(tenant="term", session="s-1")
    ledger = WriteLedger()
    search_outcomes = {"ok": 0, "typed_error": 0}
    stop = asyncio.Event()
    async with open_service(pool_max_size=6, command_timeout_s=10.0) as service:

        async def writer(w: int) -> None:
            i = 0
            while not stop.is_set():
                memory_id, content = new_id(), f"writer {w} note {i} about the span table"
                i += 1
                try:
                    await bounded(service.memories.add(scope, content, id=memory_id), CALL_BOUND_S)
                except (StorageError, ConcurrencyError) as exc:
                    ledger.failed(memory_id, content, exc)
                else:
                    ledger.acknowledged[memory_id] = content

        async def searcher() -> None:
            while not stop.is_set():
                try:
                    await bounded(service.memories.search(scope, "span table", k=5), CALL_BOUND_S)
                    search_outcomes["ok"] += 1
                except (StorageError, ConcurrencyError):
                    search_outcomes["typed_error"] += 1

        tasks = [asyncio.create_task(writer(w)) for w in range(4)]
        tasks += [asyncio.create_task(searcher()) for _ in range(2)]
        async def progress() -> None:
            """Until a search and a write succeed after the last termination."""
            searched, written = search_outcomes["ok"], len(ledger.acknowledged)
            while search_outcomes["ok"] == searched or len(ledger.acknowledged) == written:
                await asyncio.sleep(0.01)

        terminated = 0
        try:
            for n in range(TERMINATION_ROUNDS):
                await asyncio.sleep(0.05)
                if n % 10 == 9:
                    # Every tenth round lets calls through before terminating
                    # again: on a slow machine 50 ms may not be enough for a
                    # new connection to set up and answer a search.
                    await bounded(progress(), CALL_BOUND_S)
                terminated += await admin.fetchval(TERMINATE_MEMSVC_BACKENDS)
        finally:
            stop.set()
            await bounded(asyncio.gather(*tasks), CALL_BOUND_S * 2)

        assert terminated > 0, "no memsvc backend was terminated: the test injected nothing"
        assert ledger.acknowledged, "no write succeeded between terminations"
        assert search_outcomes["ok"] > 0
        # The pool heals: with terminations over, calls succeed again.
        await bounded(service.memories.count(scope), CALL_BOUND_S)
        await assert_ledger_holds(service, scope, ledger)
    await assert_every_row_has_its_created_event(admin, "memsvc")
