"""Bulk load benchmark: ``memsvc import`` with the HNSW index rebuilt vs kept in place.

    python -m benchmarks.bulk_load                  # 50,000 memories, 384-d
    python -m benchmarks.bulk_load --rows 20000 --sample 1000
    python -m benchmarks.bulk_load --measure-keep   # also time the whole keep-the-index load
    python -m benchmarks.bulk_load --database-url postgresql://...

Generates a JSONL file of ``--rows`` memories (real sentence embeddings from
``--data`` and perturbed copies of them; see :class:`VectorSource`), then,
on its own embedded PostgreSQL (or the given server), in fresh databases:

1. imports the whole file into an empty table with ``index_mode="auto"``,
   which drops the HNSW index, loads, and builds it again concurrently
   (the time includes JSON parsing, validation, COPY and the build);
2. imports ``--sample`` rows with the index in place (``index_mode="keep"``)
   into an empty table, into a table of half the rows (filled by a bulk
   load first, untimed) and into the table holding the full load: the
   per-row cost with the index kept at the start, middle and end of the
   load. Inserting the full file that way is extrapolated from those three
   costs by Simpson's rule (rows x (start + 4 x middle + end) / 6, exact
   when the cost per row is quadratic in the table size; for a cost growing
   like log n, as HNSW inserts roughly do, it comes out a little low, in
   favour of keeping the index), not measured: that takes minutes.
   ``--measure-keep`` measures it too (all rows imported with the index in
   place into an empty table), to check the estimate;
3. imports the whole file again into the table holding it (every row
   already present) with ``index_mode="auto"``, which counts the rows not
   stored yet and keeps the index, and with ``index_mode="rebuild"``
   (what ``auto`` did before it counted them: drop and rebuild for nothing).

Prints items/s of each and the ratio of the bulk load to the keep-the-index
load (extrapolated, and measured when asked).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from pathlib import Path

import asyncpg
import numpy as np

from benchmarks.memories import DEFAULT_DATA
from benchmarks.scratch import scratch_dir
from memsvc import MemoryService, Settings
from memsvc.db import migrate
from memsvc.db.embedded import EmbeddedPostgres
from memsvc.testing.postgres import with_database
from memsvc.transfer.bulk import MEMORY_VECTOR_INDEX
from memsvc.transfer.trailer import LineSink

DIM = 384


class VectorSource:
    """Where the benchmark's 384-d unit vectors come from.

    From the real MiniLM embeddings of the shared data set when it is there
    (``--data``): the 20,000 rows, then copies perturbed slightly (noise 0.02
    per dimension, renormalised), which keeps their cluster structure, as
    ``benchmarks.memories --full`` does. Real embeddings are what users load,
    and HNSW builds and inserts cost differently on them than on noise.
    Otherwise unit vectors around 64 random centres. Every file draws from
    the same source (``seed`` only changes the rows), so the samples look
    like the load they stand for.
    """

    def __init__(self, data: Path) -> None:
        path = data / "vectors.f16.npy"
        self.real = np.load(path).astype(np.float32) if path.exists() else None
        # Rows from here on are all perturbed copies (0 for generated vectors).
        self.real_rows = 0 if self.real is None else len(self.real)
        self.label = (
            "real MiniLM embeddings and perturbed copies"
            if self.real is not None
            else f"generated vectors ({path} not found)"
        )

    def vectors(self, rng: np.random.Generator, start: int, count: int) -> np.ndarray:
        if self.real is not None:
            rows = (start + np.arange(count)) % len(self.real)
            vectors = self.real[rows].astype(np.float64)
            perturbed = (start + np.arange(count)) >= len(self.real)
            vectors[perturbed] += rng.normal(scale=0.02, size=(int(perturbed.sum()), DIM))
        else:
            centers = np.random.default_rng(0).normal(size=(64, DIM))
            labels = rng.integers(0, 64, size=count)
            vectors = centers[labels] + 0.6 * rng.normal(size=(count, DIM))
        return np.asarray(vectors / np.linalg.norm(vectors, axis=1, keepdims=True))


def write_jsonl(path: Path, source: VectorSource, rows: int, seed: int, tenant: str) -> None:
    """``rows`` memory lines with 384-d unit vectors (6 decimals) and unique content.

    Samples (``seed`` > 1) start past the real rows, so every one of their
    vectors is a fresh perturbed copy, not a duplicate of the full load's.
    """
    rng = np.random.default_rng(seed)
    offset = (seed - 1) * source.real_rows
    with path.open("w", encoding="utf-8") as out:
        sink = LineSink(out)  # ends the file with a trailer, as an export does
        for start in range(0, rows, 5_000):
            count = min(5_000, rows - start)
            vectors = np.round(source.vectors(rng, offset + start, count), 6)
            lines = []
            for i in range(count):
                number = start + i
                lines.append(
                    json.dumps(
                        {
                            "type": "memory",
                            "id": str(uuid.UUID(int=(seed << 64) | number)),
                            "tenant": tenant,
                            "project": f"p{number % 10}",
                            "content": f"memory {number} ({seed})",
                            "metadata": {"n": number},
                            "importance": 0.5,
                            "embedding": vectors[i].tolist(),
                        }
                    )
                )
            sink.write_lines(lines)
        sink.write_trailer()


async def create_database(admin_dsn: str, name: str, settings: Settings) -> str:
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await conn.execute(f"CREATE DATABASE {name}")
    finally:
        await conn.close()
    dsn = with_database(admin_dsn, name)
    await asyncio.to_thread(migrate.upgrade, settings.model_copy(update={"database_url": dsn}), dsn)
    return dsn


async def timed_import(dsn: str, path: Path, mode: str) -> tuple[float, int, float, bool]:
    settings = Settings(database_url=dsn, auto_migrate=False)
    async with MemoryService.open(settings) as svc:
        started = time.perf_counter()
        report = await svc.maintenance.import_file(path, index_mode=mode)  # type: ignore[arg-type]
        seconds = time.perf_counter() - started
        if not report.ok or report.memories.inserted == 0:
            raise SystemExit(f"import failed: {report.rejected[:3]}")
        async with svc.pool.acquire() as conn:
            valid = await conn.fetchval(
                "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                "WHERE c.relname = $1",
                MEMORY_VECTOR_INDEX,
            )
    return seconds, report.memories.inserted, report.index_build_seconds, bool(valid)


async def timed_reimport(dsn: str, path: Path, mode: str) -> tuple[float, bool]:
    """Import a file whose rows are all stored already: seconds, and whether the index
    was dropped and rebuilt."""
    settings = Settings(database_url=dsn, auto_migrate=False)
    async with MemoryService.open(settings) as svc:
        started = time.perf_counter()
        report = await svc.maintenance.import_file(path, index_mode=mode)  # type: ignore[arg-type]
        seconds = time.perf_counter() - started
        if report.memories.inserted or not report.ok:
            raise SystemExit("re-import inserted or rejected rows: not a re-import")
    return seconds, report.index_rebuilt


async def run(args: argparse.Namespace) -> None:
    workdir = scratch_dir("memsvc-bulk-")
    embedded = None
    admin = args.database_url
    if admin is None:
        embedded = EmbeddedPostgres(workdir / "data")
        admin = await asyncio.to_thread(embedded.start)
    try:
        source = VectorSource(args.data)
        print(f"generating {args.rows:,} + 3 x {args.sample:,} rows ({DIM}-d, {source.label}) ...",
              flush=True)
        full, sample_empty, sample_mid, sample_full, half_fill = (
            workdir / f"{name}.jsonl" for name in ("full", "sample1", "sample2", "sample3", "half")
        )
        write_jsonl(full, source, args.rows, 1, "bench")
        write_jsonl(sample_empty, source, args.sample, 2, "bench")
        write_jsonl(sample_mid, source, args.sample, 3, "bench")
        write_jsonl(sample_full, source, args.sample, 4, "bench")
        # With the empty-table sample already in, this brings the table to half the load.
        write_jsonl(half_fill, source, max(0, args.rows // 2 - args.sample), 5, "bench")
        print(f"file: {full.stat().st_size / 2**20:.0f} MiB", flush=True)
        settings = Settings(database_url=admin, auto_migrate=False)

        bulk_dsn = await create_database(admin, "memsvc_bench_bulk", settings)
        bulk_s, bulk_rows, build_s, bulk_valid = await timed_import(bulk_dsn, full, "auto")
        print(f"bulk load: {bulk_rows:,} rows in {bulk_s:.1f} s (index build {build_s:.1f} s)",
              flush=True)

        again_auto_s, auto_rebuilt = await timed_reimport(bulk_dsn, full, "auto")
        again_rebuild_s, _ = await timed_reimport(bulk_dsn, full, "rebuild")
        print(f"re-import, all present: auto {again_auto_s:.1f} s (index rebuilt: "
              f"{auto_rebuilt}), rebuild {again_rebuild_s:.1f} s", flush=True)

        keep_dsn = await create_database(admin, "memsvc_bench_keep", settings)
        empty_s, empty_rows, _, _ = await timed_import(keep_dsn, sample_empty, "keep")
        # Fill the same table to half the load (fast path, untimed), then sample there.
        await timed_import(keep_dsn, half_fill, "rebuild")
        mid_s, mid_rows, _, _ = await timed_import(keep_dsn, sample_mid, "keep")
        full_s, full_rows, _, full_valid = await timed_import(bulk_dsn, sample_full, "keep")
        cost_empty, cost_mid, cost_full = empty_s / empty_rows, mid_s / mid_rows, full_s / full_rows
        extrapolated_s = args.rows * (cost_empty + 4 * cost_mid + cost_full) / 6
        measured_keep = None
        if args.measure_keep:
            print("importing all rows with the index in place (minutes) ...", flush=True)
            measured_dsn = await create_database(admin, "memsvc_bench_keep_all", settings)
            keep_s, keep_rows, _, _ = await timed_import(measured_dsn, full, "keep")
            measured_keep = (keep_s, keep_rows)
        bulk_rate = bulk_rows / bulk_s
        print()
        print(f"| load ({args.rows:,} memories, {DIM}-d) | seconds | items/s | ratio |")
        print("| --- | ---: | ---: | ---: |")
        print(f"| import, index dropped + rebuilt (measured) | {bulk_s:.1f} | {bulk_rate:,.0f} "
              f"| {extrapolated_s / bulk_s:.1f}x |")
        print(f"| import, index kept (extrapolated from the samples) | {extrapolated_s:.1f} | "
              f"{args.rows / extrapolated_s:,.0f} | 1.0x |")
        if measured_keep is not None:
            keep_s, keep_rows = measured_keep
            print(f"| import, index kept (measured: {keep_rows:,} rows) | {keep_s:.1f} | "
                  f"{keep_rows / keep_s:,.0f} | bulk is {keep_s / bulk_s:.1f}x faster |")
        for label, seconds, rows in (
            ("into an empty table", empty_s, empty_rows),
            (f"into a {args.rows // 2:,}-row table", mid_s, mid_rows),
            (f"into the {bulk_rows:,}-row table", full_s, full_rows),
        ):
            print(f"| - sample: {rows:,} rows {label}, index kept | {seconds:.1f} | "
                  f"{rows / seconds:,.0f} | |")
        print(f"| re-import, all {args.rows:,} rows present, auto (index kept) | "
              f"{again_auto_s:.1f} | {args.rows / again_auto_s:,.0f} | "
              f"{again_rebuild_s / again_auto_s:.1f}x |")
        print(f"| re-import, all rows present, index dropped + rebuilt | {again_rebuild_s:.1f} | "
              f"{args.rows / again_rebuild_s:,.0f} | 1.0x |")
        print()
        print(f"index build: {build_s:.1f} s of the bulk load; ratio vs the empty-table rate alone "
              f"(most favourable to keeping the index): {bulk_rate * cost_empty:.1f}x")
        print(f"HNSW index valid after the bulk load: {bulk_valid}; after the sample: {full_valid}")
        admin_conn = await asyncpg.connect(admin)
        try:
            for name in ("memsvc_bench_bulk", "memsvc_bench_keep", "memsvc_bench_keep_all"):
                await admin_conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        finally:
            await admin_conn.close()
    finally:
        if embedded is not None:
            await asyncio.to_thread(embedded.close)
        for path in workdir.glob("*.jsonl"):
            path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--sample", type=int, default=2_000)
    parser.add_argument(
        "--measure-keep",
        action="store_true",
        help="Also import all rows with the index in place (takes minutes).",
    )
    parser.add_argument("--database-url", default=None, help="A server to use (superuser).")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="embeddings-small dir")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
