"""Where a single writer's saver call goes: the commit, or the work before it.

    python -m benchmarks.langgraph.commit_latency            # 300 calls per side and setting
    python -m benchmarks.langgraph.commit_latency --calls 100 --keep-last 10

On an embedded server of its own, for ``aput`` (about 10 KB of state) and
``aput_writes`` of MemsvcSaver and LangGraph's AsyncPostgresSaver, one call
at a time, the sides taking turns call by call: p50 and mean latency, and the
WAL each call writes, first with ``synchronous_commit`` off (what the calls
cost before their commit waits for the disk) and then on (what a single
writer sees). When the two sides differ only with it on, the difference is
the disk's commit latency, not the calls.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from benchmarks.langgraph.saver import Thread
from memsvc import MemoryService, Settings
from memsvc.db.embedded import EmbeddedPostgres
from memsvc.integrations.langgraph import MemsvcSaver

OPS = {"aput": Thread.put, "aput_writes": Thread.put_writes}


async def measure(dsn: str, calls: int, keep_last: int | None, synchronous: str) -> None:
    """Print both sides' figures with ``synchronous_commit`` set for new connections."""
    admin = await asyncpg.connect(dsn)
    try:
        database = await admin.fetchval("SELECT current_database()")
        await admin.execute(f'ALTER DATABASE "{database}" SET synchronous_commit = {synchronous}')
        extra: dict[str, Any] = {}
        if keep_last is not None:
            extra["langgraph_checkpoint_keep_last"] = keep_last
        settings = Settings(
            database_url=dsn, auto_migrate=True, pool_min_size=1, pool_max_size=1, **extra
        )
        async with (
            MemoryService.open(settings) as svc,
            AsyncConnectionPool(
                dsn,
                min_size=1,
                max_size=1,
                kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
                open=False,
            ) as pool,
        ):
            await AsyncPostgresSaver(pool).setup()  # type: ignore[arg-type]
            sides = {
                "memsvc": Thread(MemsvcSaver(svc, tenant="bench")),
                "langgraph": Thread(AsyncPostgresSaver(pool)),  # type: ignore[arg-type]
            }
            for thread in sides.values():  # warm up: connections, statement caches
                for _ in range(20):
                    await thread.put()
                    await thread.put_writes()
            for op, run in OPS.items():
                seconds: dict[str, list[float]] = {name: [] for name in sides}
                wal = dict.fromkeys(sides, 0)
                for number in range(calls):
                    order = list(sides.items())
                    for name, thread in order if number % 2 else order[::-1]:
                        before = await admin.fetchval("SELECT pg_current_wal_insert_lsn()")
                        started = time.perf_counter()
                        await run(thread)
                        seconds[name].append(time.perf_counter() - started)
                        wal[name] += int(
                            await admin.fetchval(
                                "SELECT pg_current_wal_insert_lsn() - $1::pg_lsn", before
                            )
                        )
                for name in sides:
                    print(
                        f"{op:<12} synchronous_commit {synchronous:<4} {name:<10} "
                        f"p50 {statistics.median(seconds[name]) * 1e3:6.3f} ms  "
                        f"mean {statistics.fmean(seconds[name]) * 1e3:6.3f} ms  "
                        f"WAL/call {wal[name] / calls:6.0f} B"
                    )
    finally:
        await admin.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=300, help="timed calls per side")
    parser.add_argument("--keep-last", type=int, help="memsvc's langgraph_checkpoint_keep_last")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="memsvc-bench-lg-commit-"))
    embedded = EmbeddedPostgres(directory)
    dsn = await asyncio.to_thread(embedded.start)
    try:
        for synchronous in ("off", "on"):
            await measure(dsn, args.calls, args.keep_last, synchronous)
    finally:
        await asyncio.to_thread(embedded.close)
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
