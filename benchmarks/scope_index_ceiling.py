"""How many partial indexes on ``memories`` a search, a get and an add tolerate.

    python -m benchmarks.scope_index_ceiling                  # 0 -> 4,000 indexes
    python -m benchmarks.scope_index_ceiling --steps 0,32,64,128 --sessions 8

Every statement on a table locks each of its indexes while it is planned
and run (``AccessShareLock`` for reads, ``RowExclusiveLock`` for writes),
until its transaction ends. A backend keeps its first
``max_locks_per_transaction`` relation locks in its fast-path slots; the
rest go to the shared lock table, which holds about
``max_locks_per_transaction x (max_connections + other backends)`` locks for
the whole server. So the partial indexes on ``memories`` bound how many
sessions can search at once before ``out of shared memory`` (SQLSTATE
53200), and each one adds to every statement's planning.

The script adds empty partial HNSW indexes (predicates naming scopes that
hold no rows: the cost of an index is its lock and the planner's look at it,
not its size) in steps and, at each step, reports the locks one search
holds, search / get / add p50, and whether ``--sessions`` sessions each
searching inside an open transaction still fit in the lock table.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import asyncpg
import numpy as np

from memsvc import MemoryService, Scope, Settings
from memsvc.db.codecs import vector_bytes
from memsvc.db.embedded import EmbeddedPostgres

DIM = 384
SCOPE = Scope("ceiling", "p")


def unit(rng: np.random.Generator) -> np.ndarray:
    v = rng.standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


async def p50_ms(run: object, times: int = 60) -> float:
    seconds = []
    for _ in range(times):
        started = time.perf_counter()
        await run()  # type: ignore[operator]
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds) * 1000


async def concurrent_fit(pool: asyncpg.Pool, schema: str, sessions: int, query: bytes) -> str:
    """Whether ``sessions`` sessions, each holding a freshly planned search's locks, fit."""
    # A new text per call: planned afresh, as a custom plan is (the planner
    # locks every index of the table; a cached generic plan locks fewer).
    sql = (
        f"SELECT id FROM {schema}.memories WHERE tenant_id = $1 AND project_id = $2 "
        f"AND agent_id IS NULL AND session_id IS NULL AND {time.perf_counter_ns()} > 0 "
        "ORDER BY embedding <=> $3 LIMIT 10"
    )
    held = [await pool.acquire() for _ in range(sessions)]
    try:
        for conn in held:
            await conn.execute("BEGIN")
        for conn in held:
            await conn.fetch(sql, SCOPE.tenant, SCOPE.project, query)
        return "ok"
    except asyncpg.PostgresError as exc:
        return f"{exc.sqlstate}: {exc}"
    finally:
        for conn in held:
            await conn.execute("ROLLBACK")
            await pool.release(conn)


async def run(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="memsvc-ceiling-"))
    embedded = EmbeddedPostgres(workdir / "data")
    dsn = await asyncio.to_thread(embedded.start)
    settings = Settings(
        database_url=dsn, auto_migrate=True, embedding_dim=DIM, pool_max_size=max(10, args.sessions)
    )
    svc = await MemoryService.open(settings)
    admin = await asyncpg.connect(dsn)
    schema = settings.db_schema
    rng = np.random.default_rng(5)
    try:
        await svc.memories.add_many(
            SCOPE, [{"content": f"row {i}", "embedding": unit(rng)} for i in range(200)]
        )
        shown = await admin.fetchrow(
            "SELECT current_setting('max_locks_per_transaction') AS locks, "
            "current_setting('max_connections') AS connections"
        )
        print(
            f"max_locks_per_transaction {shown['locks']}, max_connections "
            f"{shown['connections']}, {args.sessions} sessions at once"
        )
        print(
            f"{'indexes':>8} {'locks/search':>12} {'search p50':>10} {'get p50':>8} "
            f"{'add p50':>8}  {args.sessions} sessions"
        )
        made = 0
        memory = (await svc.memories.list(SCOPE, limit=1))[0]
        query = unit(rng)
        for step in (int(s) for s in args.steps.split(",")):
            while made < step:
                await admin.execute(
                    f"CREATE INDEX ix_ceiling_{made} ON {schema}.memories "
                    f"USING hnsw (embedding vector_cosine_ops) WHERE tenant_id = 'none-{made}'"
                )
                made += 1
            async with svc.pool.acquire() as conn, conn.transaction():
                await conn.fetch(
                    f"SELECT id FROM {schema}.memories WHERE tenant_id = $1 "
                    "ORDER BY embedding <=> $2 LIMIT 10",
                    SCOPE.tenant,
                    vector_bytes(query),
                )
                locks = await conn.fetchval(
                    "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() "
                    "AND locktype = 'relation'"
                )
            search = await p50_ms(lambda: svc.memories.search(SCOPE, query, k=10))
            get = await p50_ms(lambda: svc.memories.get(memory.id, tenant=SCOPE.tenant))
            add = await p50_ms(
                lambda: svc.memories.add(SCOPE, f"x {time.perf_counter_ns()}", embedding=unit(rng)),
                times=30,
            )
            fit = await concurrent_fit(svc.pool, schema, args.sessions, vector_bytes(query))
            print(
                f"{made:>8} {locks:>12} {search:>9.2f}ms {get:>7.2f}ms {add:>7.2f}ms  {fit}",
                flush=True,
            )
            if fit != "ok" and args.stop:
                break
    finally:
        await admin.close()
        await svc.close()
        await asyncio.to_thread(embedded.close)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--steps", default="0,16,32,48,64,128,256,512,1024,2048,4096")
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--stop", action="store_true", help="stop at the first failure")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
