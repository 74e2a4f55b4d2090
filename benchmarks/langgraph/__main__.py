"""``python -m benchmarks.langgraph``: the saver and the store benchmarks on one server."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
from pathlib import Path

from benchmarks.langgraph.saver import run_saver
from benchmarks.langgraph.store import BIG, DEFAULT_DATA, TOTAL, report, run_store
from memsvc.db.embedded import EmbeddedPostgres


async def main() -> None:
    parser = argparse.ArgumentParser(description="memsvc vs LangGraph's PostgreSQL savers")
    parser.add_argument("--database-url", help="PostgreSQL with pgvector (default: embedded)")
    parser.add_argument("--seconds", type=float, default=1.0, help="length of one measurement")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per side")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="embeddings-small dir")
    parser.add_argument("--store-total", type=int, default=TOTAL, help="items in the store")
    parser.add_argument("--store-big", type=int, default=BIG, help="items of the big namespace")
    parser.add_argument("--part", choices=["all", "saver", "store"], default="all")
    parser.add_argument("--store-rounds", type=int, default=1, help="store rounds after the build")
    args = parser.parse_args()
    embedded = None
    directory = None
    dsn = args.database_url
    if dsn is None:
        directory = Path(tempfile.mkdtemp(prefix="memsvc-bench-lg-"))
        embedded = EmbeddedPostgres(directory)
        dsn = await asyncio.to_thread(embedded.start)
    try:
        if args.part in ("all", "saver"):
            await run_saver(dsn, seconds=args.seconds, rounds=args.rounds)
        if args.part in ("all", "store"):
            print("\nMemsvcStore vs AsyncPostgresStore (same index, same embeddings)")
            report(
                await run_store(
                    dsn, args.data, args.store_total, args.store_big, rounds=args.store_rounds
                )
            )
    finally:
        if embedded is not None:
            await asyncio.to_thread(embedded.close)
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
