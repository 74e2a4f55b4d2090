"""Erasure's client memory: flat whatever the tenant's size.

    python -m benchmarks.erasure_memory                      # 20,000 memories, embedded PostgreSQL
    python -m benchmarks.erasure_memory --memories 200000
    python -m benchmarks.erasure_memory --database-url postgresql://...
    python -m benchmarks.erasure_memory --code-path /path/to/other/checkout

Fills one agent of a tenant with ``--memories`` memories (a tenth of them
updated once, so their history holds a second content; a twentieth deleted,
so only their history holds them; each with a metadata string), and a
sibling agent with a tenth as many, through SQL shaped as memsvc writes it
(fast to fill). Then a separate process opens a service and erases the agent,
measuring:

- ``peak_traced_mib``: the peak of Python allocations during ``svc.erase``
  (``tracemalloc``), which is what grows with the tenant when the client
  holds per-memory state;
- ``rss_growth_mib``: how much the process's peak resident size grew during
  the erasure (``ru_maxrss``);
- ``seconds`` (with tracemalloc on: slower than without).

``--code-path`` runs the schema migration and the erasure with the memsvc
package found there (another checkout), to compare two versions on the same
data. Everything lives in its own schema (``--schema``), dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import asyncpg

TENANT = "bench"
PROJECT = "p"
CONTENT_HASH = "('sha256:' || encode(sha256(convert_to({0}, 'UTF8')), 'hex'))"
PRIOR = (
    "jsonb_build_object('content', o.content, 'metadata', o.metadata, 'importance', "
    "o.importance, 'key', o.key, 'expires_at', o.expires_at, 'version', o.version, "
    "'scope', jsonb_build_array(o.tenant_id, o.project_id, o.agent_id, o.session_id))"
)


def fill_sql(schema: str) -> tuple[str, list[str]]:
    """The insert of agent ``$1``'s ``$2`` memories (``$3``: a tag in every text), then the
    statements (on ``$1`` alone) writing their events, updates and deletes."""
    content = "'memory ' || g || ' of ' || $1 || ' ' || $3 || ': some words about the user'"
    scope = "tenant_id = 'bench' AND project_id = 'p' AND agent_id = $1"
    insert = f"""
INSERT INTO {schema}.memories
    (tenant_id, project_id, agent_id, session_id, id, content, content_hash, metadata)
SELECT 'bench', 'p', $1, 's-' || (g % 100), gen_random_uuid(), {content},
       {CONTENT_HASH.format(content)},
       jsonb_build_object('kind', 'note', 'source', 'import ' || g || ' ' || $3)
FROM generate_series(1, $2::int) AS g"""
    return insert, [
        f"""
INSERT INTO {schema}.memory_events
    (tenant_id, project_id, agent_id, session_id, memory_id, kind, version)
SELECT tenant_id, project_id, agent_id, session_id, id, 'created', 1
FROM {schema}.memories WHERE {scope}""",
        f"""
WITH o AS (
    SELECT * FROM {schema}.memories
    WHERE {scope} AND get_byte(uuid_send(id), 15) % 10 = 0
), u AS (
    UPDATE {schema}.memories AS m
    SET content = m.content || ' (revised)',
        content_hash = {CONTENT_HASH.format("m.content || ' (revised)'")}, version = 2
    FROM o WHERE m.tenant_id = o.tenant_id AND m.id = o.id
)
INSERT INTO {schema}.memory_events
    (tenant_id, project_id, agent_id, session_id, memory_id, kind, version, prior)
SELECT o.tenant_id, o.project_id, o.agent_id, o.session_id, o.id, 'updated', 2, {PRIOR}
FROM o""",
        f"""
WITH o AS (
    DELETE FROM {schema}.memories
    WHERE {scope} AND get_byte(uuid_send(id), 14) % 20 = 0
    RETURNING *
)
INSERT INTO {schema}.memory_events
    (tenant_id, project_id, agent_id, session_id, memory_id, kind, version, prior)
SELECT o.tenant_id, o.project_id, o.agent_id, o.session_id, o.id, 'deleted', o.version,
       {PRIOR}
FROM o""",
    ]


async def fill(dsn: str, schema: str, memories: int, tag: str = "") -> None:
    """Fill the target agent with ``memories`` memories, the sibling with a tenth as many.

    ``tag`` goes into every text (to fill the same agents again with new texts).
    """
    conn = await asyncpg.connect(dsn)
    try:
        for agent, count in (("target", memories), ("sibling", max(1, memories // 10))):
            insert, others = fill_sql(schema)
            async with conn.transaction():
                await conn.execute(insert, agent, count, tag)
                for sql in others:
                    await conn.execute(sql, agent)
        await conn.execute(f"ANALYZE {schema}.memories; ANALYZE {schema}.memory_events")
    finally:
        await conn.close()


def child(mode: str, dsn: str, schema: str) -> None:
    """In its own process: migrate the schema, or erase the target agent and measure."""
    import memsvc
    from memsvc import MemoryService, Scope, Settings

    print(f"memsvc from {Path(memsvc.__file__).parent}", file=sys.stderr)

    async def run() -> dict[str, float]:
        settings = Settings(database_url=dsn, db_schema=schema, auto_migrate=True)
        async with MemoryService.open(settings) as svc:
            if mode == "migrate":
                return {}
            before_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            tracemalloc.start()
            began = time.perf_counter()
            receipt = await svc.erase(Scope(TENANT, PROJECT, "target"))
            seconds = time.perf_counter() - began
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_rss
            assert receipt.verified, receipt.remaining
            return {
                "erased": receipt.removed.get("tombstones", 0),
                "peak_traced_mib": round(peak / 2**20, 2),
                "rss_growth_mib": round(growth / 1024, 2),  # ru_maxrss is in KiB on Linux
                "seconds": round(seconds, 1),
            }

    print(json.dumps(asyncio.run(run())))


def run_child(mode: str, dsn: str, schema: str, code_path: str | None) -> dict[str, float]:
    env = dict(os.environ)
    if code_path:
        env["PYTHONPATH"] = code_path + os.pathsep + env.get("PYTHONPATH", "")
    # Run as a script (not -m): the working directory must not come first on
    # the child's path, or its memsvc would shadow the one in --code-path.
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", mode,
         "--database-url", dsn, "--schema", schema],
        env=env, capture_output=True, text=True,
    )
    print(out.stderr.strip(), file=sys.stderr)
    out.check_returncode()
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


async def drop(dsn: str, schema: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    finally:
        await conn.close()


def measure(dsn: str, schema: str, memories: int, code_path: str | None) -> dict[str, float]:
    asyncio.run(drop(dsn, schema))
    try:
        run_child("migrate", dsn, schema, code_path)
        began = time.perf_counter()
        asyncio.run(fill(dsn, schema, memories))
        print(f"filled {memories} memories (+{memories // 10} sibling) in "
              f"{time.perf_counter() - began:.0f}s", file=sys.stderr)
        return run_child("erase", dsn, schema, code_path)
    finally:
        asyncio.run(drop(dsn, schema))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", help="PostgreSQL with pgvector (default: embedded)")
    parser.add_argument("--schema", default="memsvc_erasure_memory")
    parser.add_argument("--memories", type=int, default=20_000)
    parser.add_argument("--code-path", help="a directory holding another memsvc package")
    parser.add_argument("--child", choices=("migrate", "erase"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.database_url, args.schema)
        return

    from memsvc.db.embedded import EmbeddedPostgres

    embedded = None
    data_dir = None
    dsn = args.database_url
    if dsn is None:
        data_dir = Path(tempfile.mkdtemp(prefix="memsvc-bench-"))
        embedded = EmbeddedPostgres(data_dir)
        dsn = embedded.start()
    try:
        result = measure(dsn, args.schema, args.memories, args.code_path)
    finally:
        if embedded is not None:
            embedded.close()
        if data_dir is not None:
            shutil.rmtree(data_dir, ignore_errors=True)
    print(json.dumps({"erasure_memory": {"memories": args.memories, **result}}))


if __name__ == "__main__":
    main()
