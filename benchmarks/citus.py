"""One workload on one PostgreSQL and on a Citus cluster (coordinator + 2 workers), ratios.

    MEMSVC_CITUS_KIT=<kit dir> python -m benchmarks.citus
    MEMSVC_CITUS_KIT=<kit dir> python -m benchmarks.citus --tenants 20 --per-tenant 100 --rounds 3

The same memsvc calls run against the embedded server (one node) and against
a 3-node cluster started from the Citus kit (``memsvc.testing.citus``), all
on this machine, the schema distributed by ``memsvc citus apply``:

- ``add``: single adds with 384-d embeddings, spread over the tenants;
- ``tenant search``: ``memories.search`` in one tenant (routed to one shard);
- ``cross-tenant top-10``: the nearest memories of every tenant, the one
  statement that fans out to every shard (raw SQL: memsvc's searches always
  name a tenant);
- ``get``: ``memories.get`` by id and tenant.

Each op's ops/s is the median of ``--rounds`` rounds; the ratio is cluster /
one node. All nodes share this machine's cores, so the figures show the
coordinator hop's overhead, not what more machines would add: a tenant-routed
call costs one extra hop through the coordinator; a cross-tenant top-k runs
on every shard in parallel, which spreads over machines in a real deployment.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np

from memsvc import MemoryService, Scope, Settings
from memsvc.db import migrate
from memsvc.db.embedded import EmbeddedPostgres
from memsvc.embedding import HashingEmbedder
from memsvc.ops.citus import apply_citus
from memsvc.testing.citus import CitusCluster, kit_directory
from memsvc.testing.postgres import settings_for_tests

DIM = 384
SCHEMA = "bench"
CROSS_TENANT_TOP_10 = (
    f"SELECT tenant_id, id FROM {SCHEMA}.memories ORDER BY embedding <=> $1::text::vector LIMIT 10"
)


def vectors(count: int, seed: int) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(size=(count, DIM)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


async def timed(calls: list[Callable[[], Awaitable[Any]]]) -> float:
    """Calls per second, run one after the other."""
    start = time.perf_counter()
    for call in calls:
        await call()
    return len(calls) / (time.perf_counter() - start)


async def workload(dsn: str, *, citus: bool, args: argparse.Namespace) -> dict[str, float]:
    settings: Settings = settings_for_tests(dsn, db_schema=SCHEMA)
    await asyncio.to_thread(migrate.upgrade, settings, dsn)
    if citus:
        conn = await asyncpg.connect(dsn)
        try:
            await apply_citus(conn, settings)
        finally:
            await conn.close()
    tenants = [f"tenant-{i:03d}" for i in range(args.tenants)]
    results: dict[str, list[float]] = {}
    async with MemoryService.open(settings, embedder=HashingEmbedder(DIM)) as svc:
        ids: list[tuple[str, Any]] = []
        for round_ in range(args.rounds):
            data = vectors(args.tenants * args.per_tenant, seed=round_)

            async def add(tenant: str, text: str, vector: Any) -> None:
                memory = await svc.memories.add(Scope(tenant, "p"), text, embedding=vector)
                ids.append((tenant, memory.id))

            adds = [
                functools.partial(add, tenants[i % len(tenants)], f"r{round_} memory {i}", vector)
                for i, vector in enumerate(data)
            ]
            results.setdefault("add", []).append(await timed(adds))
            queries = vectors(args.ops, seed=1000 + round_)
            searches = [
                functools.partial(
                    svc.memories.search,
                    Scope(tenants[i % len(tenants)]),
                    q,
                    k=10,
                    include="descendants",
                )
                for i, q in enumerate(queries)
            ]
            results.setdefault("tenant search", []).append(await timed(searches))
            conn = await asyncpg.connect(dsn)
            try:
                texts = ["[" + ",".join(f"{x:.5f}" for x in q) + "]" for q in queries]
                fanned = [functools.partial(conn.fetch, CROSS_TENANT_TOP_10, t) for t in texts]
                results.setdefault("cross-tenant top-10", []).append(await timed(fanned))
            finally:
                await conn.close()
            picks = [ids[(i * 7919) % len(ids)] for i in range(args.ops)]
            gets = [functools.partial(svc.memories.get, m, tenant=t) for t, m in picks]
            results.setdefault("get", []).append(await timed(gets))
    return {op: statistics.median(values) for op, values in results.items()}


async def main(args: argparse.Namespace) -> None:
    kit = kit_directory()
    server = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="memsvc-bench-")))
    single_dsn = server.start()
    try:
        single = await workload(single_dsn, citus=False, args=args)
    finally:
        server.stop()
    cluster = await asyncio.to_thread(CitusCluster.start, kit)
    try:
        distributed = await workload(cluster.dsn, citus=True, args=args)
    finally:
        await asyncio.to_thread(cluster.destroy)
    print(
        f"Citus (coordinator + 2 workers, one machine) vs one node: {args.tenants} tenants x "
        f"{args.per_tenant} memories per round, {args.ops} searches / gets, "
        f"median of {args.rounds} rounds"
    )
    print(f"  {'op':<22}{'one node ops/s':>16}{'cluster ops/s':>16}{'ratio':>8}")
    for op, value in single.items():
        print(f"  {op:<22}{value:>16,.0f}{distributed[op]:>16,.0f}{distributed[op] / value:>8.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--per-tenant", type=int, default=50, help="memories added per round")
    parser.add_argument("--ops", type=int, default=200, help="searches and gets per round")
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(parser.parse_args()))
