"""Read replicas benchmark: search throughput with one replica vs the primary alone.

    python -m benchmarks.replicas                       # embedded primary + a replica, 10,000 rows
    python -m benchmarks.replicas --rows 50000 --seconds 10
    python -m benchmarks.replicas --database-url postgresql://primary/db \\
        --replica-url postgresql://replica/db

Fills a store with random unit vectors spread over scopes, waits for the
replica to replay it, then runs 10 concurrent clients doing k=10 vector
searches in random scopes for a fixed time, alternating two services on the
same data: one reading from the primary only, one with ``replica_urls``
(round robin over the replica; the primary serves whatever the replica
cannot). Raw asyncpg running the same statement on the primary, in the same
run, anchors the figures. Without URLs the primary and the replica are
servers the benchmark starts on this machine: they share its cores, so the
ratio shows routing's overhead and correctness here, not a deployment's gain
(see the README's "Read replicas").
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import numpy as np

from memsvc import MemoryService, Scope, Settings
from memsvc.memories.queries import MEMORY_COLUMNS_NO_EMBEDDING
from memsvc.testing.replica import ReplicatedPostgres

SCHEMA = "bench_replicas"
SCOPES = 20
DIM = 384


def unit_vectors(count: int, seed: int) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((count, DIM)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows


async def fill(svc: MemoryService, rows: int) -> None:
    async with svc.pool.acquire() as conn:
        await conn.execute(f"TRUNCATE {SCHEMA}.memories, {SCHEMA}.memory_events CASCADE")
    vectors = unit_vectors(rows, seed=1)
    batch = 500
    for start in range(0, rows, batch):
        scope = Scope("bench", f"p{(start // batch) % SCOPES}")
        items = [
            {"content": f"note {n}", "embedding": vectors[n]}
            for n in range(start, min(rows, start + batch))
        ]
        await svc.memories.add_many(scope, items)
    async with svc.pool.acquire() as conn:
        await conn.execute(f"ANALYZE {SCHEMA}.memories")


async def caught_up(primary_dsn: str, replica_dsn: str) -> None:
    primary = await asyncpg.connect(primary_dsn)
    try:
        target = await primary.fetchval("SELECT pg_current_wal_insert_lsn()")
    finally:
        await primary.close()
    replica = await asyncpg.connect(replica_dsn)
    try:
        while await replica.fetchval("SELECT pg_last_wal_replay_lsn()") < target:
            await asyncio.sleep(0.05)
    finally:
        await replica.close()


async def throughput(
    search: Callable[[int, np.ndarray], Awaitable[Any]], seconds: float, clients: int
) -> float:
    """Searches per second of ``clients`` concurrent loops over ``seconds``."""
    queries = unit_vectors(1_000, seed=2)
    done = 0
    deadline = time.perf_counter() + seconds

    async def client(seed: int) -> None:
        nonlocal done
        rng = random.Random(seed)
        while time.perf_counter() < deadline:
            await search(rng.randrange(SCOPES), queries[rng.randrange(len(queries))])
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(client(seed) for seed in range(clients)))
    return done / (time.perf_counter() - started)


async def run(
    primary_dsn: str, replica_dsn: str, rows: int, seconds: float, rounds: int, clients: int
) -> None:
    base: dict[str, Any] = {
        "database_url": primary_dsn,
        "db_schema": SCHEMA,
        "auto_migrate": True,
        "pool_max_size": clients,
        # Filling with the HNSW index in place is slow on a busy machine.
        "statement_timeout_ms": 0,
    }
    primary_only = Settings(**base)
    with_replica = Settings(**base, replica_urls=[replica_dsn])
    async with MemoryService.open(primary_only) as plain:
        started = time.perf_counter()
        await fill(plain, rows)
        await caught_up(primary_dsn, replica_dsn)
        print(f"filled {rows:,} rows in {SCOPES} scopes, replayed on the replica "
              f"in {time.perf_counter() - started:.0f} s")
        async with MemoryService.open(with_replica) as routed:
            scopes = [Scope("bench", f"p{i}") for i in range(SCOPES)]
            # The columns a search hit carries (every one but the embedding).
            raw_sql = (
                f"SELECT {MEMORY_COLUMNS_NO_EMBEDDING}, embedding <=> $3 AS distance "
                f"FROM {SCHEMA}.memories WHERE tenant_id = $1 AND project_id = $2 "
                "AND agent_id IS NULL AND session_id IS NULL AND embedding IS NOT NULL "
                "AND (expires_at IS NULL OR expires_at > now()) "
                "ORDER BY embedding <=> $3 LIMIT 10"
            )
            raw_pool = plain.pool  # memsvc's codecs (binary vectors), raw statements

            async def raw(i: int, vector: np.ndarray) -> Any:
                async with raw_pool.acquire() as conn:
                    return await conn.fetch(raw_sql, "bench", f"p{i}", vector)

            sides: dict[str, Callable[[int, np.ndarray], Awaitable[Any]]] = {
                "raw asyncpg, primary": raw,
                "memsvc, primary only": lambda i, v: plain.memories.search(scopes[i], v, k=10),
                "memsvc, 1 replica": lambda i, v: routed.memories.search(scopes[i], v, k=10),
            }
            for search in sides.values():  # warm caches and statement caches
                await throughput(search, 1.0, clients)
            measured: dict[str, list[float]] = {name: [] for name in sides}
            for n in range(rounds):
                names = list(sides)
                names = names[n % len(names) :] + names[: n % len(names)]
                for name in names:
                    measured[name].append(await throughput(sides[name], seconds, clients))
            served = sum(replica.reads for replica in routed.reads.status())
            share = served / max(1, served + routed.reads.primary_reads)
        print(f"{clients} concurrent clients, k=10 vector search, "
              f"{rounds} rounds of {seconds:.0f} s")
        print(f"{'side':<24} {'searches/s (median)':>20} {'per round':>30}")
        for name, values in measured.items():
            rounds_text = ", ".join(f"{value:.0f}" for value in values)
            print(f"{name:<24} {float(np.median(values)):>20.0f} {rounds_text:>30}")
        medians = {name: float(np.median(values)) for name, values in measured.items()}
        print(f"1 replica / primary only = "
              f"{medians['memsvc, 1 replica'] / medians['memsvc, primary only']:.2f}")
        print(f"primary only / raw       = "
              f"{medians['memsvc, primary only'] / medians['raw asyncpg, primary']:.2f}")
        print(f"reads served by the replica: {share:.0%}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--database-url", help="the primary (default: start one here)")
    parser.add_argument("--replica-url", help="a streaming replica of --database-url")
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=10)
    args = parser.parse_args()
    if args.database_url and args.replica_url:
        await run(args.database_url, args.replica_url, args.rows, args.seconds, args.rounds,
                  args.clients)
        return
    servers = await asyncio.to_thread(ReplicatedPostgres.start)
    try:
        await run(servers.primary_dsn, servers.replica_dsn, args.rows, args.seconds,
                  args.rounds, args.clients)
    finally:
        await asyncio.to_thread(servers.stop)


if __name__ == "__main__":
    asyncio.run(main())
