"""``python -m benchmarks.langgraph``: run the LangGraph benchmarks on one server."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
from pathlib import Path

from benchmarks.langgraph.saver import run_saver
from memsvc.db.embedded import EmbeddedPostgres


async def main() -> None:
    parser = argparse.ArgumentParser(description="memsvc vs LangGraph's PostgreSQL savers")
    parser.add_argument("--database-url", help="PostgreSQL with pgvector (default: embedded)")
    parser.add_argument("--seconds", type=float, default=1.0, help="length of one measurement")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per side")
    args = parser.parse_args()
    embedded = None
    directory = None
    dsn = args.database_url
    if dsn is None:
        directory = Path(tempfile.mkdtemp(prefix="memsvc-bench-lg-"))
        embedded = EmbeddedPostgres(directory)
        dsn = await asyncio.to_thread(embedded.start)
    try:
        await run_saver(dsn, seconds=args.seconds, rounds=args.rounds)
    finally:
        if embedded is not None:
            await asyncio.to_thread(embedded.close)
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
