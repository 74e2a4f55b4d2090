"""MemsvcSaver against LangGraph's AsyncPostgresSaver, same server, same run.

For ``aput`` (about 10 KB of channel state, every channel at a new version),
``aput_writes`` (three writes of a new task), ``aget_tuple`` (a thread's
newest checkpoint, 10 KB of state and its writes) and ``alist`` (100
checkpoints of a thread), one task and 10 concurrent tasks, it prints ops/s
of each side and their ratio (memsvc / LangGraph; target >= 1.0x).

The peer is LangGraph's ``AsyncPostgresSaver`` (psycopg 3) on a psycopg pool
of the same size as memsvc's. An ``AsyncPostgresSaver`` serializes its calls
with a lock, so for the concurrent runs each task gets its own saver on the
shared pool: the peer is measured at its best, not behind its own lock.
Within each round the sides take turns in slices of a tenth of the round
(each going first in turn), so drift in a shared machine's load hits both;
the ratio printed is the median of the rounds' ratios, the rates the medians
of each side.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from memsvc import MemoryService, Settings
from memsvc.integrations.langgraph import MemsvcSaver

POOL_SIZE = 10
# Alternating turns per side within one round (see run_saver).
SLICES = 10
MODES = {"1 task": 1, "10 tasks": 10}
OPS = ("aput", "aput_writes", "aget_tuple", "alist 100")

# About 10 KB of channel state: a conversation of 20 messages plus small channels.
STATE: dict[str, Any] = {
    "messages": [
        {"role": "user" if i % 2 else "assistant", "content": f"message {i} " + "x" * 480}
        for i in range(20)
    ],
    "step": 7,
    "plan": {"goal": "answer the question", "done": ["search", "read"], "next": "write"},
}

SaverFactory = Callable[[], Awaitable[BaseCheckpointSaver[Any]]]


def checkpoint(saver: BaseCheckpointSaver[Any], previous: Checkpoint | None) -> Checkpoint:
    """A new checkpoint of STATE with every channel at its next version."""
    old = previous["channel_versions"] if previous else {}
    versions = {channel: saver.get_next_version(old.get(channel), None) for channel in STATE}
    return {
        "v": 4,
        "id": str(uuid6(clock_seq=-1)),
        "ts": "2026-11-23T00:00:00+00:00",
        "channel_values": dict(STATE),
        "channel_versions": versions,
        "versions_seen": {"agent": dict(versions)},
        "updated_channels": list(STATE),
    }


class Thread:
    """One LangGraph thread a task writes to and reads from."""

    def __init__(self, saver: BaseCheckpointSaver[Any]) -> None:
        self.saver = saver
        self.id = f"bench-{uuid.uuid4()}"
        self.config: dict[str, Any] = {"configurable": {"thread_id": self.id, "checkpoint_ns": ""}}
        self.last: Checkpoint | None = None

    async def put(self) -> None:
        cp = checkpoint(self.saver, self.last)
        self.config = await self.saver.aput(
            self.config, cp, {"source": "loop", "step": 1, "parents": {}}, cp["channel_versions"]
        )
        self.last = cp

    async def put_writes(self) -> None:
        writes = [("messages", STATE["messages"][:1]), ("step", 8), ("plan", None)]
        await self.saver.aput_writes(self.config, writes, str(uuid.uuid4()))

    async def get_tuple(self) -> None:
        found = await self.saver.aget_tuple(
            {"configurable": {"thread_id": self.id, "checkpoint_ns": ""}}
        )
        assert found is not None and found.checkpoint["channel_values"]["step"] == 7

    async def list_100(self) -> None:
        items = [
            t async for t in self.saver.alist({"configurable": {"thread_id": self.id}}, limit=100)
        ]
        assert len(items) == 100


RUN = {
    "aput": Thread.put,
    "aput_writes": Thread.put_writes,
    "aget_tuple": Thread.get_tuple,
    "alist 100": Thread.list_100,
}


async def prepare(make_saver: SaverFactory, op: str, tasks: int) -> list[Thread]:
    """One thread per task, holding what the reads need (a checkpoint with writes,
    or 100 checkpoints)."""
    threads = [Thread(await make_saver()) for _ in range(tasks)]
    setup = 100 if op == "alist 100" else 1
    for thread in threads:
        for _ in range(setup):
            await thread.put()
        await thread.put_writes()
    return threads


async def measure(threads: list[Thread], op: str, seconds: float) -> float:
    """Ops/s of one task per thread calling ``op`` until ``seconds`` have passed."""
    run = RUN[op]
    done = 0

    async def loop(thread: Thread, deadline: float) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            await run(thread)
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(loop(thread, started + seconds) for thread in threads))
    return done / (time.perf_counter() - started)


async def run_saver(dsn: str, *, seconds: float = 1.0, rounds: int = 5) -> list[dict[str, Any]]:
    """Measure both savers on ``dsn``; print and return one row per (op, mode)."""
    settings = Settings(
        database_url=dsn, auto_migrate=True, pool_min_size=POOL_SIZE, pool_max_size=POOL_SIZE
    )
    rows: list[dict[str, Any]] = []
    async with (
        MemoryService.open(settings) as svc,
        AsyncConnectionPool(
            dsn,
            min_size=POOL_SIZE,
            max_size=POOL_SIZE,
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
            open=False,
        ) as pool,
    ):
        await AsyncPostgresSaver(pool).setup()  # type: ignore[arg-type]
        memsvc_saver = MemsvcSaver(svc, tenant="bench")

        async def ours() -> BaseCheckpointSaver[Any]:
            return memsvc_saver

        async def theirs() -> BaseCheckpointSaver[Any]:
            return AsyncPostgresSaver(pool)  # type: ignore[arg-type]

        print(f"MemsvcSaver vs AsyncPostgresSaver: {rounds} rounds of {seconds:g} s per side")
        print(f"{'op':<12} {'mode':<9} {'memsvc/s':>10} {'langgraph/s':>12} {'ratio':>7}")
        for op in OPS:
            for mode, tasks in MODES.items():
                mine: list[float] = []
                peer: list[float] = []
                # warm both sides up: connections, statement caches
                mine_threads = await prepare(ours, op, tasks)
                peer_threads = await prepare(theirs, op, tasks)
                await measure(mine_threads, op, seconds / 4)
                await measure(peer_threads, op, seconds / 4)
                for _ in range(rounds):
                    # Each side's second is cut into SLICES alternating turns
                    # (who goes first alternates too), so a drift in the
                    # machine's load (commit latency on a shared disk, other
                    # jobs' CPU) hits both sides alike.
                    mine_rates: list[float] = []
                    peer_rates: list[float] = []
                    for number in range(SLICES):
                        if number % 2:
                            peer_rates.append(await measure(peer_threads, op, seconds / SLICES))
                        mine_rates.append(await measure(mine_threads, op, seconds / SLICES))
                        if not number % 2:
                            peer_rates.append(await measure(peer_threads, op, seconds / SLICES))
                    mine.append(statistics.fmean(mine_rates))
                    peer.append(statistics.fmean(peer_rates))
                row = {
                    "op": op,
                    "mode": mode,
                    "memsvc": statistics.median(mine),
                    "langgraph": statistics.median(peer),
                }
                # the median of each round's ratio: a round's two runs share its drift
                row["ratio"] = statistics.median(m / p for m, p in zip(mine, peer, strict=True))
                rows.append(row)
                print(
                    f"{op:<12} {mode:<9} {row['memsvc']:>10.0f} {row['langgraph']:>12.0f} "
                    f"{row['ratio']:>6.2f}x"
                )
    return rows
