"""Figures of the Citus fixtures: cluster start, migrate + distribute, per-test reset.

Not a test (pytest does not collect it). Run, with the kit named:
``MEMSVC_CITUS_KIT=<kit dir> python -m tests.citus.measure [--rounds N]``;
``CITUS_CONF="citus.shard_count=8"`` measures with fewer shards.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from memsvc import HashingEmbedder, MemoryService, Scope
from memsvc.db import migrate
from memsvc.testing.citus import CitusCluster, CitusSchema, distribute, kit_directory


async def some_rows(schema: CitusSchema) -> None:
    """What a typical test leaves behind: memories of two tenants, their events."""
    async with MemoryService.open(schema.settings, embedder=HashingEmbedder()) as svc:
        for tenant in ("acme", "globex"):
            await svc.memories.add_many(
                Scope(tenant=tenant, project="p"), [f"memory {i}" for i in range(20)]
            )


async def rebuild(schema: CitusSchema) -> None:
    """Drop the schema, migrate and distribute again."""
    await schema.drop()
    await schema.build()


async def timed(label: str, rounds: int, step: Callable[[], Awaitable[Any]],
                before: Callable[[], Awaitable[Any]] | None = None) -> None:
    times = []
    for _ in range(rounds):
        if before is not None:
            await before()
        start = time.perf_counter()
        await step()
        times.append(time.perf_counter() - start)
    print(f"{label}: median {statistics.median(times) * 1000:.0f} ms, "
          f"min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f} ({rounds} rounds)")


async def measure(cluster: CitusCluster, rounds: int) -> None:
    schema = CitusSchema(cluster)
    start = time.perf_counter()
    await asyncio.to_thread(migrate.upgrade, schema.settings, cluster.dsn)
    migrated = time.perf_counter()
    await distribute(cluster.dsn, schema.settings)
    distributed = time.perf_counter()
    print(f"memsvc migrate: {(migrated - start) * 1000:.0f} ms; "
          f"distribution script: {(distributed - migrated) * 1000:.0f} ms")
    await schema.drop()
    await schema.build()
    await timed("reset by DELETE (the fixture's)", rounds, schema.reset,
                lambda: some_rows(schema))
    await timed("reset by TRUNCATE", rounds, schema.truncate, lambda: some_rows(schema))
    await timed("reset by DROP SCHEMA + migrate + distribute", max(2, rounds // 5),
                lambda: rebuild(schema), lambda: some_rows(schema))

    async def open_service() -> None:
        async with MemoryService.open(schema.settings, embedder=HashingEmbedder()):
            pass

    await timed("MemoryService.open + close", rounds, open_service)
    await schema.drop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    start = time.perf_counter()
    cluster = CitusCluster.start(kit_directory())
    print(f"nothing to a running 3-node cluster: {time.perf_counter() - start:.1f} s")
    try:
        asyncio.run(measure(cluster, args.rounds))
    finally:
        start = time.perf_counter()
        cluster.destroy()
        print(f"destroy: {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
