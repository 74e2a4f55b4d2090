"""Telemetry overhead: ``add`` and ``search`` with the OpenTelemetry SDK recording vs without.

    python -m benchmarks.telemetry                 # embedded PostgreSQL, ~1 minute
    python -m benchmarks.telemetry --database-url postgresql://... --ops 2000

Three ways of running the same calls on the same service, taking turns in
chunks of a few calls so they share the machine's noise:

- ``untraced``: the repository methods without memsvc's telemetry wrapper
  (what memsvc cost before telemetry existed);
- ``api only``: the wrapper with OpenTelemetry's no-op API (no SDK: the
  default for an app that does not configure OpenTelemetry);
- ``sdk``: the SDK installed and recording every span (sampled, batched to a
  discarding exporter) and every duration in a histogram.

Ratios are ops/s against ``untraced``: the median over chunks of back-to-back
ratios (and the ratio of totals); the target is ``sdk`` >= 0.95x for ``add``
and ``search``. The client's CPU time per call (every thread of the
process, the span exporter's included) shows the overhead itself, which
wall-clock ratios on a busy machine only bound.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from memsvc import MemoryService, Scope, Settings, telemetry
from memsvc.db.embedded import EmbeddedPostgres
from memsvc.repositories.memories import MemoryRepository

DIM = 384
SCOPE_ROWS = 1_000
Call = Callable[[int], Awaitable[object]]


class DiscardingExporter(SpanExporter):
    """Receives the batches an OTLP exporter would send, and drops them."""

    def __init__(self) -> None:
        self.exported = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.exported += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def untraced(name: str) -> Callable[..., Awaitable[Any]]:
    """The repository method under memsvc's telemetry wrapper."""
    method: Callable[..., Awaitable[Any]] = getattr(MemoryRepository, name).__wrapped__
    return method


def calls(svc: MemoryService, mode: str, traced: bool) -> dict[str, Call]:
    rng = np.random.default_rng(7)
    vectors = unit(rng.normal(size=(4096, DIM)))
    scope = Scope("bench", "telemetry")
    add = svc.memories.add if traced else untraced("add").__get__(svc.memories)
    search = svc.memories.search if traced else untraced("search").__get__(svc.memories)
    counter = iter(range(10**9))

    async def add_one(i: int) -> object:
        n = next(counter)
        return await add(scope, f"memory {mode} {n}", embedding=vectors[n % len(vectors)])

    async def search_one(i: int) -> object:
        return await search(scope, vectors[i % len(vectors)], k=10)

    return {"add": add_one, "search": search_one}


async def timed(call: Call, first: int, ops: int) -> tuple[float, float]:
    """Wall and process CPU seconds (all threads: the span exporter's too) for ``ops`` calls."""
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(first, first + ops):
        await call(i)
    return time.perf_counter() - wall, time.process_time() - cpu


async def run(dsn: str, ops: int, chunk: int) -> None:
    settings = Settings(database_url=dsn, auto_migrate=True, pool_max_size=4)
    exporter = DiscardingExporter()
    sdk_traces = TracerProvider()
    sdk_traces.add_span_processor(BatchSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    sdk_metrics = MeterProvider(metric_readers=[reader])
    modes: dict[str, tuple[Any, Any, bool]] = {
        "untraced": (trace.NoOpTracerProvider(), metrics.NoOpMeterProvider(), False),
        "api only": (None, None, True),  # the global providers, which no one set
        "sdk": (sdk_traces, sdk_metrics, True),
    }
    async with MemoryService.open(settings) as svc:
        await svc.pool.execute(
            f"TRUNCATE {settings.db_schema}.memories, {settings.db_schema}.memory_events CASCADE"
        )
        prefill = unit(np.random.default_rng(1).normal(size=(SCOPE_ROWS, DIM)))
        await svc.memories.add_many(
            Scope("bench", "telemetry"),
            [{"content": f"prefill {i}", "embedding": v} for i, v in enumerate(prefill)],
        )
        by_mode = {mode: calls(svc, mode, traced) for mode, (_, _, traced) in modes.items()}
        for mode, (tracer_provider, meter_provider, _) in modes.items():  # warm up
            telemetry.configure(tracer_provider=tracer_provider, meter_provider=meter_provider)
            for call in by_mode[mode].values():
                await timed(call, 0, 20)

        print(
            f"{ops:,} calls per mode, interleaved in chunks of {chunk}, "
            f"{SCOPE_ROWS:,}-row scope (+ the adds)"
        )
        print(
            f"{'operation':<10} {'untraced':>9} {'api only':>9} {'sdk':>9}  ops/s   "
            f"{'client CPU us/call':>28}   ratios to untraced (ops/s)"
        )
        for operation in ("add", "search"):
            wall = {mode: 0.0 for mode in modes}
            cpu = {mode: 0.0 for mode in modes}
            paired: dict[str, list[float]] = {mode: [] for mode in modes}
            for number, first in enumerate(range(0, ops, chunk)):
                order = list(modes)
                # Rotate who goes first, so no mode always follows another.
                order = order[number % 3 :] + order[: number % 3]
                spent_now: dict[str, float] = {}
                for mode in order:
                    tracer_provider, meter_provider, _ = modes[mode]
                    telemetry.configure(
                        tracer_provider=tracer_provider, meter_provider=meter_provider
                    )
                    spent, used = await timed(by_mode[mode][operation], first, chunk)
                    spent_now[mode] = spent
                    wall[mode] += spent
                    cpu[mode] += used
                for mode in modes:
                    paired[mode].append(spent_now["untraced"] / spent_now[mode])
            rate = {mode: ops / wall[mode] for mode in modes}
            us = {mode: cpu[mode] / ops * 1e6 for mode in modes}
            # The median of back-to-back chunks' ratios resists a busy
            # machine's bursts better than the ratio of totals (also shown).
            ratio = {mode: statistics.median(paired[mode]) for mode in modes}
            print(
                f"{operation:<10} {rate['untraced']:>9,.0f} {rate['api only']:>9,.0f} "
                f"{rate['sdk']:>9,.0f}         "
                f"{us['untraced']:>8.0f} {us['api only']:>8.0f} {us['sdk']:>8.0f}   "
                f"api only {ratio['api only']:.3f}x, sdk {ratio['sdk']:.3f}x "
                f"(totals {rate['api only'] / rate['untraced']:.3f}x, "
                f"{rate['sdk'] / rate['untraced']:.3f}x; target sdk >= 0.95)",
                flush=True,
            )
    telemetry.configure()
    sdk_traces.shutdown()
    data = reader.get_metrics_data()
    points = (
        0
        if data is None
        else sum(
            len(m.data.data_points)
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
        )
    )
    sdk_metrics.shutdown()
    print(
        f"ops/s over all chunks; the sdk exported {exporter.exported:,} spans, "
        f"{points} metric points"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", help="PostgreSQL with pgvector (default: embedded)")
    parser.add_argument("--ops", type=int, default=600, help="calls per mode (default 600)")
    parser.add_argument("--chunk", type=int, default=10, help="calls per turn (default 10)")
    args = parser.parse_args()
    if args.database_url:
        asyncio.run(run(args.database_url, args.ops, args.chunk))
        return
    embedded = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="memsvc-bench-")))
    try:
        asyncio.run(run(embedded.start(), args.ops, args.chunk))
    finally:
        embedded.close()


if __name__ == "__main__":
    main()
