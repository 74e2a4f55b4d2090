"""Erasure benchmark: ``svc.erase`` against raw asyncpg on the same server, same run.

    python -m benchmarks.erasure                          # embedded PostgreSQL, ~1 minute
    python -m benchmarks.erasure --database-url postgresql://...
    python -m benchmarks.erasure --memories 10000

Each round fills two sibling agents with ``--memories`` memories each (every
one updated once, so its history holds its content twice, and a tenth of them
deleted, so only their history holds them), then erases one agent:

- memsvc: ``svc.erase(scope)``, the check included (the queries by scope,
  and the search for the erased texts: the sibling's rows read for the texts
  they hold too, the tables without scope columns searched);
- raw: the same removal with none of the checks, in batches of the same size:
  ``SELECT ... FOR UPDATE`` the next memories, ``DELETE`` them and their events
  and ``INSERT`` tombstones in one statement; then the deleted memories'
  histories, found through ``prior->'scope'``, replaced the same way.

Reports memories (live and deleted) erased per second for both, and their
ratio, over ``--rounds`` rounds. Everything lives in its own schema
(``--schema``, default ``memsvc_bench``), dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import asyncpg

from memsvc import Memory, MemoryService, Scope, Settings
from memsvc.db.embedded import EmbeddedPostgres

BATCH = 500


def raw_erase_sql(schema: str) -> tuple[str, str, str, str]:
    lock = f"""
SELECT tenant_id, id FROM {schema}.memories
WHERE tenant_id = $1 AND project_id = $2 AND agent_id = $3
ORDER BY tenant_id, id LIMIT {BATCH} FOR UPDATE"""
    erase = f"""
WITH d AS (SELECT * FROM unnest($1::text[], $2::uuid[]) AS d(tenant_id, id)),
gone AS (DELETE FROM {schema}.memories m USING d
         WHERE m.tenant_id = d.tenant_id AND m.id = d.id RETURNING m.tenant_id, m.id, m.version),
ev AS (DELETE FROM {schema}.memory_events e USING d
       WHERE e.tenant_id = d.tenant_id AND e.memory_id = d.id)
INSERT INTO {schema}.memory_events (tenant_id, memory_id, kind, version)
SELECT tenant_id, id, 'erased', version FROM gone"""
    deleted = f"""
SELECT DISTINCT e.tenant_id, e.memory_id FROM {schema}.memory_events e
WHERE e.tenant_id = $1 AND e.prior -> 'scope' ->> 1 = $2 AND e.prior -> 'scope' ->> 2 = $3
  AND e.kind <> 'erased'
  AND NOT EXISTS (SELECT 1 FROM {schema}.memories m
                  WHERE m.tenant_id = e.tenant_id AND m.id = e.memory_id)
LIMIT {BATCH}"""
    histories = f"""
WITH d AS (SELECT * FROM unnest($1::text[], $2::uuid[]) AS d(tenant_id, id)),
h AS (DELETE FROM {schema}.memory_events e USING d
      WHERE e.tenant_id = d.tenant_id AND e.memory_id = d.id
      RETURNING e.tenant_id, e.memory_id, e.version)
INSERT INTO {schema}.memory_events (tenant_id, memory_id, kind, version)
SELECT tenant_id, memory_id, 'erased', max(version) FROM h GROUP BY tenant_id, memory_id"""
    return lock, erase, deleted, histories


async def raw_erase(raw: asyncpg.Pool, schema: str, scope: Scope) -> int:
    lock, erase, deleted, histories = raw_erase_sql(schema)
    done = 0
    for select, statement in ((lock, erase), (deleted, histories)):
        while True:
            async with raw.acquire() as conn, conn.transaction():
                rows = await conn.fetch(select, scope.tenant, scope.project, scope.agent)
                if not rows:
                    break
                await conn.execute(statement, [r[0] for r in rows], [r[1] for r in rows])
                done += len(rows)
    return done


async def revise(svc: MemoryService, memories: list[Memory]) -> None:
    """Update each memory once; delete every tenth (only its history holds it then)."""
    for memory in memories:
        await svc.memories.update(memory.id, metadata={"revised": True})
        if int(memory.id) % 10 == 0:
            await svc.memories.delete(memory.id)


async def fill(svc: MemoryService, scope: Scope, count: int, tag: str) -> None:
    for start in range(0, count, 1000):
        items = [
            f"{tag} memory {i} of {scope.agent}: some words about the user"
            for i in range(start, min(count, start + 1000))
        ]
        memories = await svc.memories.add_many(scope.with_session("s"), items)
        await asyncio.gather(*(revise(svc, memories[part::8]) for part in range(8)))


async def run(dsn: str, schema: str, count: int, rounds: int) -> dict[str, float]:
    settings = Settings(database_url=dsn, auto_migrate=True, db_schema=schema)
    svc = await MemoryService.open(settings)
    raw = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    assert raw is not None
    rates: dict[str, list[float]] = {"memsvc": [], "raw": []}
    try:
        version = await raw.fetchval("SHOW server_version")
        print(f"PostgreSQL {version}; schema {schema}; {count} memories per agent")
        for round_ in range(rounds):
            for who in ("memsvc", "raw"):
                # A tenant per round: verification reads the tenant's rows, and
                # earlier rounds' siblings would make later rounds slower.
                target = Scope(f"bench-{round_}-{who}", "p", "target")
                await fill(svc, target, count, who)
                await fill(svc, Scope(target.tenant, "p", "sibling"), count, who)
                began = time.perf_counter()
                if who == "memsvc":
                    receipt = await svc.erase(target, batch_size=BATCH)
                    assert receipt.verified, receipt.remaining
                    erased = receipt.removed["tombstones"]
                else:
                    erased = await raw_erase(raw, schema, target)
                seconds = time.perf_counter() - began
                assert erased == count, (who, erased)
                rates[who].append(erased / seconds)
                print(f"  round {round_ + 1} {who:>6}: {erased / seconds:10.0f} memories/s")
    finally:
        await raw.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await raw.close()
        await svc.close()
    memsvc_rate = statistics.median(rates["memsvc"])
    raw_rate = statistics.median(rates["raw"])
    print(f"  median: memsvc {memsvc_rate:.0f}/s, raw {raw_rate:.0f}/s, "
          f"ratio {memsvc_rate / raw_rate:.2f}")
    return {"memsvc": memsvc_rate, "raw": raw_rate, "ratio": memsvc_rate / raw_rate}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", help="PostgreSQL with pgvector (default: embedded)")
    parser.add_argument("--schema", default="memsvc_bench", help="schema to create and drop")
    parser.add_argument("--memories", type=int, default=2000, help="memories per agent")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    embedded = None
    dsn = args.database_url
    data_dir = None
    if dsn is None:
        data_dir = Path(tempfile.mkdtemp(prefix="memsvc-bench-"))
        embedded = EmbeddedPostgres(data_dir)
        dsn = embedded.start()
    try:
        result = asyncio.run(run(dsn, args.schema, args.memories, args.rounds))
    finally:
        if embedded is not None:
            embedded.close()
        if data_dir is not None:
            shutil.rmtree(data_dir, ignore_errors=True)
    print(json.dumps({"erase_memories_per_s": result}))


if __name__ == "__main__":
    main()
