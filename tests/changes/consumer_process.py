"""A change feed consumer run as its own process by the SIGKILL test.

Usage: python consumer_process.py DSN LOG. It resumes after the cursor on the
last complete line of LOG and appends one line per change it processes
(``cursor entity id version kind``), until it is killed.
"""

from __future__ import annotations

import asyncio
import os
import sys

from memsvc import MemoryService
from memsvc.testing.postgres import settings_for_tests


async def main(dsn: str, log: str) -> None:
    with open(log) as existing:
        lines = existing.read().split("\n")[:-1]
    since = lines[-1].split(" ")[0] if lines else None
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    async with MemoryService.open(settings_for_tests(dsn, pool_max_size=2)) as svc:
        async for change in svc.changes(since=since):
            line = f"{change.cursor} {change.entity} {change.entity_id} {change.version} "
            # One write per change: the line is the change's "processed" record.
            os.write(fd, f"{line}{change.kind}\n".encode())


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
