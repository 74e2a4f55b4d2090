"""memsvc's import against raw COPY, and against another checkout, in alternating rounds.

    python -m benchmarks.import_rounds --base 20000 --rows 50000 --rounds 3 [--other DIR]

An embedded PostgreSQL holds a store of ``--base`` rows (memsvc's table and a
raw copy ``LIKE ... INCLUDING ALL``, vector indexes dropped as the growth
curve drops them), restored before every run. Each run is one child of
``benchmarks.scale --child import|raw-import`` loading the same ``--rows``
new rows (the growth curve's rows and line format); ``--other`` runs the
import child of another checkout too (say, the commit before a change), in
rotating order. Prints wall seconds, rows/s, the ratio to raw of the round,
and the client's and the server's CPU seconds, with the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from benchmarks.bulk_load import VectorSource
from benchmarks.memories import DEFAULT_DATA, bytes_connection
from benchmarks.scale import RAW_TABLE, Layout, memory_line, row_id, vector_index
from memsvc import MemoryService, Settings
from memsvc.db.embedded import EmbeddedPostgres
from memsvc.transfer import records
from memsvc.transfer.trailer import LineSink

ROOT = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")


def write_rows(
    path: Path, settings: Settings, layout: Layout, source: VectorSource, end: int
) -> None:
    start = layout.size
    scopes = layout.grow(end)
    vectors = source.vectors(np.random.default_rng(end), start, end - start)
    with path.open("w", encoding="utf-8") as out:
        sink = LineSink(out)  # ends the file with a trailer, as an export does
        sink.write_lines([records.header_line(settings, datetime.now(UTC))])
        for n in range(start, end):
            scope = scopes[n - start]
            sink.write_lines([
                memory_line(
                    row_id(n),
                    scope,
                    f"memory {n} of {'/'.join(filter(None, scope))}",
                    {"n": n, "b": n % 4},
                    vectors[n - start],
                )
            ])
        sink.write_trailer()


def server_cpu(postmaster: int) -> float:
    """CPU seconds of the server: the postmaster, its live children and those reaped."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(entry), int(fields[1])
        if pid == postmaster:
            total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        elif ppid == postmaster:
            total += int(fields[11]) + int(fields[12])
    return total / TICK


async def run_child(
    tree: Path, kind: str, dsn: str, path: Path, postmaster: int
) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    before_children = os.times()
    server_before = server_cpu(postmaster)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "benchmarks.scale",
        "--child",
        kind,
        "--dsn",
        dsn,
        "--file",
        str(path),
        cwd=tree,
        env=env,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"child {kind} in {tree} failed")
    await asyncio.sleep(0.3)  # the backend's exit is reaped
    after_children = os.times()
    result: dict[str, float] = json.loads(out.decode().strip().splitlines()[-1])
    result["client_cpu"] = (
        after_children.children_user
        + after_children.children_system
        - before_children.children_user
        - before_children.children_system
    )
    result["server_cpu"] = server_cpu(postmaster) - server_before
    return result


async def main(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="memsvc-import-rounds-"))
    embedded = EmbeddedPostgres(workdir / "data")
    dsn = await asyncio.to_thread(embedded.start)
    settings = Settings(database_url=dsn, auto_migrate=True, statement_timeout_ms=0)
    schema = settings.db_schema
    svc = await MemoryService.open(settings)
    await svc.close()
    admin = await bytes_connection(dsn, {})
    postmaster = await admin.fetchval(
        "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'"
    )
    postmaster = int(Path(f"/proc/{postmaster}/stat").read_text().rsplit(")", 1)[1].split()[1])
    source = VectorSource(args.data)
    layout = Layout()
    base, rows = workdir / "base.jsonl", workdir / "rows.jsonl"
    write_rows(base, settings, layout, source, args.base)
    write_rows(rows, settings, layout, source, args.base + args.rows)
    await admin.execute(f"DROP TABLE IF EXISTS {RAW_TABLE}")
    await admin.execute(f"CREATE TABLE {RAW_TABLE} (LIKE {schema}.memories INCLUDING ALL)")
    for table in (f"{schema}.memories", RAW_TABLE):
        name, _ = await vector_index(admin, table)
        await admin.execute(f"DROP INDEX {name}")
    await run_child(ROOT, "import", dsn, base, postmaster)
    await run_child(ROOT, "raw-import", dsn, base, postmaster)
    for table in ("memories", "memory_events"):
        await admin.execute(f"CREATE TABLE public.keep_{table} AS TABLE {schema}.{table}")
    await admin.execute(f"CREATE TABLE public.keep_raw AS TABLE {RAW_TABLE}")

    # Generated columns are computed again, not copied.
    columns = {
        table: await admin.fetchval(
            "SELECT array_agg(quote_ident(attname) ORDER BY attnum) FROM pg_attribute "
            "WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped "
            "AND attgenerated = ''",
            table,
        )
        for table in (f"{schema}.memories", f"{schema}.memory_events", RAW_TABLE)
    }

    async def restore() -> None:
        await admin.execute(
            f"TRUNCATE {schema}.memories, {schema}.memory_events, {RAW_TABLE} CASCADE"
        )
        for table, keep in (
            (f"{schema}.memories", "keep_memories"),
            (f"{schema}.memory_events", "keep_memory_events"),
            (RAW_TABLE, "keep_raw"),
        ):
            names = ", ".join(columns[table])
            await admin.execute(
                f"INSERT INTO {table} ({names}) OVERRIDING SYSTEM VALUE "
                f"SELECT {names} FROM public.{keep}"
            )
        await admin.execute(
            f"VACUUM ANALYZE {schema}.memories, {schema}.memory_events, {RAW_TABLE}"
        )
        await admin.execute("CHECKPOINT")

    sides = [("new", ROOT, "import"), ("raw", ROOT, "raw-import")]
    if args.other:
        sides.insert(1, ("old", args.other.resolve(), "import"))
    figures: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in sides}
    print(f"base {args.base:,} rows, import {args.rows:,} rows, {args.rounds} rounds")
    for round_ in range(args.rounds):
        order = sides[round_ % len(sides) :] + sides[: round_ % len(sides)]
        for name, tree, kind in order:
            await restore()
            load = os.getloadavg()[0]
            result = await run_child(tree, kind, dsn, rows, postmaster)
            result["load"] = load
            figures[name].append(result)
            print(
                f"  round {round_} {name:>3}: {result['seconds']:6.2f} s "
                f"{args.rows / result['seconds']:8,.0f} rows/s  client cpu "
                f"{result['client_cpu']:5.2f} s server cpu {result['server_cpu']:5.2f} s "
                f"load {load:.2f}",
                flush=True,
            )
        raw_seconds = figures["raw"][-1]["seconds"]
        print(
            "    ratios to raw: "
            + ", ".join(
                f"{name} {raw_seconds / figures[name][-1]['seconds']:.2f}x"
                for name in figures
                if name != "raw"
            ),
            flush=True,
        )
    for name, runs in figures.items():
        print(
            f"{name}: median {statistics.median(r['seconds'] for r in runs):.2f} s, "
            f"ratios to raw per round "
            + (
                ", ".join(
                    f"{r2['seconds'] / r['seconds']:.2f}"
                    for r, r2 in zip(runs, figures["raw"], strict=True)
                )
            )
        )
    await admin.close()
    await asyncio.to_thread(embedded.close)
    __import__("shutil").rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--base", type=int, default=20_000, help="rows stored before each run")
    parser.add_argument("--rows", type=int, default=50_000, help="rows each run imports")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--other", type=Path, help="another checkout whose import to compare")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    asyncio.run(main(parser.parse_args()))
