"""Where ``delete_scope`` and ``gc`` spend their time, and how they compare with raw deletes.

    python -m benchmarks.delete_cost                  # breakdown, then 3 alternating rounds
    python -m benchmarks.delete_cost --rounds 5 --batch 1000

One embedded PostgreSQL (or ``--database-url``) holds memsvc's store and an
identical raw table (``LIKE memories INCLUDING ALL``: same columns and
indexes, no foreign keys, no history). Rows are text with two metadata keys
(a heap delete does not touch the vector index; ``benchmarks.scale`` measures
the same operations with vectors, as part of its growth curve).

Breakdown (one 10,000-row scope, the repository's own statements, batch by
batch as ``delete_scope`` runs them): milliseconds per 1,000 rows for the
lock, the delete hook (assemblies) and the delete with its history events;
``EXPLAIN ANALYZE`` of one batch (rolled back) splits the last into the heap
delete, the event insert and the assembly foreign key's trigger; then the
cost of gc's copy of those events' commit times.

Rounds (memsvc and raw in alternating order, like ``benchmarks.scale``):
``delete_scope`` of a 10,000-row scope vs raw batched ``DELETE ... USING
(SELECT ... FOR UPDATE SKIP LOCKED)``, and ``gc`` of 10,000 expired rows (after
an untimed gc) vs the same raw batches by expiry, gc's default batch size on
both sides. Prints rows/s and the ratio with the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from benchmarks.scratch import scratch_dir
from memsvc import MemoryService, Scope, Settings
from memsvc.assemblies import queries as assembly_queries
from memsvc.db.embedded import EmbeddedPostgres
from memsvc.memories import queries as q
from memsvc.memories.repository import content_hash
from memsvc.ops import gc_queries
from memsvc.ops.maintenance import DEFAULT_BATCH as GC_BATCH

ROWS = 10_000
RAW_TABLE = "public.bench_delete_raw"
COPY_COLUMNS = ["tenant_id", "project_id", "id", "content", "content_hash", "metadata",
                "importance", "expires_at"]


def load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


class DeleteCost:
    """Both stores, and the figures of one run."""

    def __init__(self, svc: MemoryService, admin: asyncpg.Connection, raw: asyncpg.Pool) -> None:
        self.svc = svc
        self.admin = admin
        self.raw = raw
        self.schema = svc.settings.db_schema
        self.scopes = 0

    async def fill(self, content: str, ttl: float | None = None) -> Scope:
        """A new 10,000-row scope on both sides (raw: same rows, no history)."""
        self.scopes += 1
        scope = Scope("doomed", f"s{self.scopes}")
        for start in range(0, ROWS, 2_000):
            await self.svc.memories.add_many(scope, [
                {"content": f"{content} {self.scopes} {i}", "metadata": {"n": i, "b": i % 4},
                 **({"ttl": ttl} if ttl else {})}
                for i in range(start, start + 2_000)
            ])
        expires = await self.admin.fetchval("SELECT now() + make_interval(secs => $1)", ttl or 0)
        await self.admin.copy_records_to_table(
            RAW_TABLE.split(".")[1], schema_name="public", columns=COPY_COLUMNS,
            records=[
                (scope.tenant, scope.project, uuid.uuid4(), f"{content} {self.scopes} {i}",
                 content_hash(f"{content} {self.scopes} {i}"), f'{{"n": {i}, "b": {i % 4}}}',
                 0.5, expires if ttl else None)
                for i in range(ROWS)
            ],
        )
        # Untimed: copy the commit times of the adds' events, as benchmarks.scale does.
        await self.svc.maintenance.gc()
        for table in (f"{self.schema}.memories", f"{self.schema}.memory_events", RAW_TABLE):
            await self.admin.execute(f"VACUUM ANALYZE {table}")
        return scope

    async def raw_batches(self, condition: str, order: str, args: tuple[Any, ...],
                          batch: int) -> int:
        sql = (f"WITH batch AS (SELECT tenant_id, id FROM {RAW_TABLE} WHERE {condition} "
               f"ORDER BY {order} LIMIT {batch} FOR UPDATE SKIP LOCKED) "
               f"DELETE FROM {RAW_TABLE} AS r USING batch "
               "WHERE r.tenant_id = batch.tenant_id AND r.id = batch.id")
        total = 0
        while True:
            deleted = int((await self.raw.execute(sql, *args)).split()[-1])
            total += deleted
            if deleted == 0:
                return total

    async def breakdown(self, batch: int) -> None:
        scope = await self.fill("breakdown")
        s = self.schema
        lock = q.lock_scope_batch(s, "tenant_id = $1 AND project_id = $2", "$3")
        args = (scope.tenant, scope.project, batch)
        delete = q.delete_locked(s)
        # One batch explained and rolled back: the plan's node times.
        explained = self.admin.transaction()
        await explained.start()
        rows = await self.admin.fetch(lock, *args)
        tenants, ids = [r["tenant_id"] for r in rows], [r["id"] for r in rows]
        plan = "\n".join(r[0] for r in await self.admin.fetch(
            f"EXPLAIN (ANALYZE, BUFFERS) {delete}", tenants, ids))
        await explained.rollback()

        def node(pattern: str) -> str:
            found = re.search(pattern, plan)
            return found.group(1) if found else "?"

        delete_ms = node(r"Delete on memories.*?actual time=[0-9.]+\.\.([0-9.]+)")
        insert_ms = node(r"Insert on memory_events.*?actual time=[0-9.]+\.\.([0-9.]+)")
        trigger_ms = node(r"Trigger for constraint fk_assembly_members_\w+ on memories: "
                          r"time=([0-9.]+)")
        print(f"EXPLAIN ANALYZE of one {batch:,}-row batch (load {load()}): heap delete "
              f"{delete_ms} ms, event insert {insert_ms} ms, assembly FK trigger {trigger_ms} "
              f"ms, total {node(r'Execution Time: ([0-9.]+)')} ms")
        parts: dict[str, list[float]] = {"lock": [], "hook": [], "delete + events": [],
                                         "begin + commit": []}
        while True:
            t0 = time.perf_counter()
            tr = self.admin.transaction()
            await tr.start()
            t1 = time.perf_counter()
            rows = await self.admin.fetch(lock, *args)
            t2 = time.perf_counter()
            if not rows:
                await tr.rollback()
                break
            tenants, ids = [r["tenant_id"] for r in rows], [r["id"] for r in rows]
            await self.admin.fetch(assembly_queries.assemblies_of_memories(s), tenants, ids)
            t3 = time.perf_counter()
            await self.admin.fetchval(delete, tenants, ids)
            t4 = time.perf_counter()
            await tr.commit()
            t5 = time.perf_counter()
            per = 1000 / len(rows) * 1000
            parts["begin + commit"].append((t1 - t0 + t5 - t4) * per)
            parts["lock"].append((t2 - t1) * per)
            parts["hook"].append((t3 - t2) * per)
            parts["delete + events"].append((t4 - t3) * per)
        print(f"delete_scope's statements, ms per 1,000 rows, median of {len(parts['lock'])} "
              f"batches (load {load()}): "
              + ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in parts.items()))
        persist = gc_queries.persist_commit_times(s)
        times = []
        while True:
            t0 = time.perf_counter()
            done = await self.admin.fetchval(persist, batch)
            if done:
                times.append((time.perf_counter() - t0) * 1000 / done * 1000)
            if done < batch:
                break
        print(f"gc's copy of their commit times: {statistics.median(times):.1f} ms per 1,000 "
              f"events, median of {len(times)} batches (load {load()})")

    async def delete_scope(self, memsvc_first: bool) -> float:
        scope = await self.fill("doomed")

        async def mine() -> int:
            return await self.svc.memories.delete_scope(scope)

        async def theirs() -> int:
            return await self.raw_batches(
                "tenant_id = $1 AND project_id = $2", "tenant_id, id",
                (scope.tenant, scope.project), 1_000,
            )

        return await self.paired("delete_scope", memsvc_first, mine, theirs)

    async def gc(self, memsvc_first: bool) -> float:
        scope = await self.fill("expiring", ttl=86_400.0)
        for table in (f"{self.schema}.memories", RAW_TABLE):
            await self.admin.execute(
                f"UPDATE {table} SET expires_at = now() - interval '1 second' "
                "WHERE tenant_id = $1 AND project_id = $2", scope.tenant, scope.project,
            )

        async def mine() -> int:
            return (await self.svc.maintenance.gc()).expired_deleted

        async def theirs() -> int:
            return await self.raw_batches(
                "expires_at IS NOT NULL AND expires_at <= now()", "expires_at", (), GC_BATCH
            )

        return await self.paired("gc", memsvc_first, mine, theirs)

    async def paired(
        self,
        name: str,
        memsvc_first: bool,
        mine: Callable[[], Awaitable[int]],
        theirs: Callable[[], Awaitable[int]],
    ) -> float:
        """Time both sides' removal of ROWS rows in the given order; print and return raw/memsvc."""
        timed: dict[str, float] = {}
        for side in ("memsvc", "raw") if memsvc_first else ("raw", "memsvc"):
            started = time.perf_counter()
            deleted = await (mine() if side == "memsvc" else theirs())
            timed[side] = time.perf_counter() - started
            assert deleted == ROWS, (side, deleted)
        print(f"{name}: memsvc {ROWS / timed['memsvc']:,.0f} rows/s, raw "
              f"{ROWS / timed['raw']:,.0f} rows/s, {timed['raw'] / timed['memsvc']:.2f}x "
              f"(load {load()})", flush=True)
        return timed["raw"] / timed["memsvc"]


async def run(args: argparse.Namespace) -> None:
    embedded = None
    dsn = args.database_url
    if dsn is None:
        embedded = EmbeddedPostgres(scratch_dir("memsvc-delete-") / "data")
        dsn = await asyncio.to_thread(embedded.start)
    settings = Settings(database_url=dsn, auto_migrate=True, pool_max_size=4,
                        statement_timeout_ms=0)
    svc = await MemoryService.open(settings)
    admin = await asyncpg.connect(dsn)
    raw = await asyncpg.create_pool(dsn, min_size=1, max_size=settings.pool_max_size)
    try:
        await admin.execute(f"DROP TABLE IF EXISTS {RAW_TABLE}")
        await admin.execute(
            f"CREATE TABLE {RAW_TABLE} (LIKE {settings.db_schema}.memories INCLUDING ALL)"
        )
        bench = DeleteCost(svc, admin, raw)
        if not args.no_breakdown:
            await bench.breakdown(args.batch)
        ratios: dict[str, list[float]] = {"delete_scope": [], "gc": []}
        for round_ in range(args.rounds):
            ratios["delete_scope"].append(await bench.delete_scope(round_ % 2 == 0))
            ratios["gc"].append(await bench.gc(round_ % 2 == 0))
        for name, values in ratios.items():
            if values:
                print(f"{name}: memsvc / raw throughput "
                      f"{' '.join(f'{v:.2f}' for v in values)}x, median "
                      f"{statistics.median(values):.2f}x")
    finally:
        await raw.close()
        await admin.close()
        await svc.close()
        if embedded is not None:
            await asyncio.to_thread(embedded.close)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--database-url", help="PostgreSQL with pgvector (default: embedded)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds vs raw")
    parser.add_argument("--batch", type=int, default=1_000, help="breakdown's batch size")
    parser.add_argument("--no-breakdown", action="store_true", help="only the rounds")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
