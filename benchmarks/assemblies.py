"""Assembly and checkpoint benchmark: memsvc against raw asyncpg on the same server, same run.

    python -m benchmarks.assemblies                          # embedded PostgreSQL, ~1 minute
    python -m benchmarks.assemblies --database-url postgresql://...
    python -m benchmarks.assemblies --scale 3                # longer, steadier runs

Reports, each as a ratio to raw asyncpg on the same tables:
- ``add_members`` (one new member with a 384-d embedding per call) ops/s, from
  one task and from 8 concurrent tasks (sharing one assembly, and on 8
  assemblies). Raw does, in a transaction: ``SELECT ... FOR UPDATE`` the
  assembly, ``INSERT`` the member row, ``UPDATE`` member_count. memsvc also
  locks and validates the memory, and keeps embedded_count, the float8 sum and
  the centroid.
- ``add_members`` with 100 members per call, members/s; raw inserts them
  with one ``INSERT ... SELECT unnest(...)``.
- checkpoint ``create`` and ``latest`` ops/s with 10 KB and 1 MB of JSON data.
  Raw ``create`` is ``json.dumps`` + one INSERT (no session lock, no
  retention); raw ``latest`` is one indexed SELECT + ``json.loads``. memsvc
  also validates the data and prunes to the newest 50 in the same transaction.

Everything lives in its own schema (``--schema``, default ``memsvc_bench``),
dropped at the end, so pointing it at an existing database leaves the rest alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np

from memsvc import MemoryService, Scope, Settings
from memsvc.core.ids import new_id
from memsvc.db.embedded import EmbeddedPostgres

DIM = 384
TASKS = 8
CHUNK = 25


def checkpoint_data(size: int) -> dict[str, Any]:
    """A session-state-like JSON object of about ``size`` bytes."""
    turn = {"role": "assistant", "content": "x" * 180, "tokens": 42, "tool": None}
    turns = max(1, size // len(json.dumps(turn)))
    return {"task": "edit", "step": 7, "messages": [dict(turn, i=i) for i in range(turns)]}


class Bench:
    def __init__(self, svc: MemoryService, raw: asyncpg.Pool, schema: str, scale: float) -> None:
        self.svc = svc
        self.raw = raw
        self.schema = schema
        self.scale = scale
        self.scope = Scope("bench", "p", "a", "s")
        self.results: list[tuple[str, float, float]] = []

    def ops(self, base: int) -> int:
        return max(1, int(base * self.scale))

    def report(self, name: str, memsvc_rate: float, raw_rate: float) -> None:
        self.results.append((name, memsvc_rate, raw_rate))
        print(
            f"  {name:<44} {memsvc_rate:>10,.0f} {raw_rate:>10,.0f} {memsvc_rate / raw_rate:>8.2f}",
            flush=True,
        )

    # ------------------------------------------------------------------ assemblies

    async def memories(self, count: int) -> list[uuid.UUID]:
        rng = np.random.default_rng(1)
        vectors = rng.normal(size=(count, DIM)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        stored = await self.svc.memories.add_many(
            self.scope, [{"content": f"m{i}", "embedding": v} for i, v in enumerate(vectors)]
        )
        return [m.id for m in stored]

    async def new_assembly(self) -> uuid.UUID:
        return (await self.svc.assemblies.create(self.scope, f"bench {new_id()}")).id

    async def raw_add(self, assembly_id: uuid.UUID, memory_id: uuid.UUID) -> None:
        s = self.schema
        async with self.raw.acquire() as conn, conn.transaction():
            await conn.fetchrow(
                f"SELECT member_count FROM {s}.assemblies WHERE tenant_id = $1 AND id = $2 "
                "FOR UPDATE",
                "bench", assembly_id,
            )
            await conn.execute(
                f"INSERT INTO {s}.assembly_members (tenant_id, assembly_id, memory_id) "
                "VALUES ($1, $2, $3)",
                "bench", assembly_id, memory_id,
            )
            await conn.execute(
                f"UPDATE {s}.assemblies SET member_count = member_count + 1 "
                "WHERE tenant_id = $1 AND id = $2",
                "bench", assembly_id,
            )

    async def raw_add_batch(self, assembly_id: uuid.UUID, memory_ids: list[uuid.UUID]) -> None:
        s = self.schema
        async with self.raw.acquire() as conn, conn.transaction():
            await conn.fetchrow(
                f"SELECT member_count FROM {s}.assemblies WHERE tenant_id = $1 AND id = $2 "
                "FOR UPDATE",
                "bench", assembly_id,
            )
            await conn.execute(
                f"INSERT INTO {s}.assembly_members (tenant_id, assembly_id, memory_id) "
                "SELECT $1, $2, unnest($3::uuid[])",
                "bench", assembly_id, memory_ids,
            )
            await conn.execute(
                f"UPDATE {s}.assemblies SET member_count = member_count + $3 "
                "WHERE tenant_id = $1 AND id = $2",
                "bench", assembly_id, len(memory_ids),
            )

    async def add_member_batches(self, ids: list[uuid.UUID], size: int = 100) -> None:
        mine, theirs = await self.new_assembly(), await self.new_assembly()
        batches = [ids[i : i + size] for i in range(0, len(ids) - size + 1, size)]
        await self.svc.assemblies.add_members(mine, batches[0])
        await self.raw_add_batch(theirs, batches[0])
        mem_time = raw_time = 0.0
        for batch in batches[1:]:
            t = time.perf_counter()
            await self.svc.assemblies.add_members(mine, batch)
            mem_time += time.perf_counter() - t
            t = time.perf_counter()
            await self.raw_add_batch(theirs, batch)
            raw_time += time.perf_counter() - t
        done = size * (len(batches) - 1)
        self.report(f"add_members, {size} per call (members/s)", done / mem_time, done / raw_time)

    async def add_members(self, ids: list[uuid.UUID]) -> None:
        ops = min(len(ids), self.ops(600))
        # One task. Chunks alternate between memsvc and raw so both see the same noise.
        mine, theirs = await self.new_assembly(), await self.new_assembly()
        for warm in ids[:CHUNK]:  # statements prepared, caches warm
            await self.svc.assemblies.add_members(mine, [warm])
            await self.raw_add(theirs, warm)
        mem_time = raw_time = 0.0
        for start in range(CHUNK, ops, CHUNK):
            chunk = ids[start : min(ops, start + CHUNK)]
            t = time.perf_counter()
            for memory_id in chunk:
                await self.svc.assemblies.add_members(mine, [memory_id])
            mem_time += time.perf_counter() - t
            t = time.perf_counter()
            for memory_id in chunk:
                await self.raw_add(theirs, memory_id)
            raw_time += time.perf_counter() - t
        done = ops - CHUNK
        self.report("add_members, 1 task (ops/s)", done / mem_time, done / raw_time)

        per_task = min(len(ids) // TASKS, self.ops(150))
        for shared in (True, False):
            rates = []
            for add in (self.svc.assemblies.add_members, None):
                targets = [await self.new_assembly()] * TASKS if shared else [
                    await self.new_assembly() for _ in range(TASKS)
                ]

                async def task(
                    t: int, add: Any = add, targets: list[uuid.UUID] = targets
                ) -> None:
                    for memory_id in ids[t * per_task : (t + 1) * per_task]:
                        if add is None:
                            await self.raw_add(targets[t], memory_id)
                        else:
                            await add(targets[t], [memory_id])

                start = time.perf_counter()
                await asyncio.gather(*(task(t) for t in range(TASKS)))
                rates.append(TASKS * per_task / (time.perf_counter() - start))
            label = "1 shared assembly" if shared else "8 assemblies"
            self.report(f"add_members, {TASKS} tasks, {label} (ops/s)", rates[0], rates[1])

    # ------------------------------------------------------------------ checkpoints

    async def raw_create(self, session: str, data: Any) -> None:
        text = json.dumps(data)
        await self.raw.execute(
            f"INSERT INTO {self.schema}.session_checkpoints "
            "(tenant_id, project_id, agent_id, session_id, id, description, data, size_bytes) "
            "VALUES ($1, $2, $3, $4, $5, '', $6::jsonb, $7)",
            "bench", "p", "a", session, new_id(), text, len(text.encode()),
        )

    async def raw_latest(self, session: str) -> Any:
        text = await self.raw.fetchval(
            f"SELECT data FROM {self.schema}.session_checkpoints "
            "WHERE tenant_id = $1 AND project_id = $2 AND agent_id = $3 AND session_id = $4 "
            "ORDER BY created_at DESC, id DESC LIMIT 1",
            "bench", "p", "a", session,
        )
        return json.loads(text)

    async def checkpoints(self, label: str, size: int, ops: int) -> None:
        data = checkpoint_data(size)
        mine = Scope("bench", "p", "a", f"memsvc-{label}")
        theirs = f"raw-{label}"

        async def timed(call: Callable[[], Awaitable[Any]]) -> float:
            await call()  # warm
            start = time.perf_counter()
            for _ in range(ops):
                await call()
            return ops / (time.perf_counter() - start)

        mem_create = await timed(lambda: self.svc.checkpoints.create(mine, data))
        raw_create = await timed(lambda: self.raw_create(theirs, data))
        self.report(f"checkpoint create, {label} (ops/s)", mem_create, raw_create)
        mem_latest = await timed(lambda: self.svc.checkpoints.latest(mine))
        raw_latest = await timed(lambda: self.raw_latest(theirs))
        self.report(f"checkpoint latest, {label} (ops/s)", mem_latest, raw_latest)


async def run(dsn: str, schema: str, scale: float) -> list[tuple[str, float, float]]:
    settings = Settings(database_url=dsn, auto_migrate=True, db_schema=schema)
    svc = await MemoryService.open(settings)
    raw = await asyncpg.create_pool(dsn, min_size=TASKS, max_size=settings.pool_max_size)
    assert raw is not None
    bench = Bench(svc, raw, schema, scale)
    try:
        version = await raw.fetchval("SHOW server_version")
        print(f"PostgreSQL {version}; schema {schema}; scale {scale}")
        print(f"  {'':<44} {'memsvc':>10} {'raw':>10} {'ratio':>8}")
        ids = await bench.memories(max(bench.ops(600), TASKS * bench.ops(150)))
        await bench.add_members(ids)
        await bench.add_member_batches(ids)
        await bench.checkpoints("10 KB", 10 * 1024, bench.ops(300))
        await bench.checkpoints("1 MB", 1024 * 1024, bench.ops(15))
    finally:
        await raw.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await raw.close()
        await svc.close()
    return bench.results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", help="PostgreSQL with pgvector (default: embedded)")
    parser.add_argument("--schema", default="memsvc_bench", help="schema to create and drop")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply operation counts")
    args = parser.parse_args()

    embedded = None
    dsn = args.database_url
    data_dir = None
    if dsn is None:
        data_dir = Path(tempfile.mkdtemp(prefix="memsvc-bench-"))
        embedded = EmbeddedPostgres(data_dir)
        dsn = embedded.start()
    try:
        results = asyncio.run(run(dsn, args.schema, args.scale))
    finally:
        if embedded is not None:
            embedded.close()
        if data_dir is not None:
            shutil.rmtree(data_dir, ignore_errors=True)
    print(json.dumps({name: {"memsvc": m, "raw": r, "ratio": m / r} for name, m, r in results}))


if __name__ == "__main__":
    main()
