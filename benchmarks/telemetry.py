"""Telemetry overhead: ``add`` and ``search`` with the OpenTelemetry SDK recording vs without.

    python -m benchmarks.telemetry                 # embedded PostgreSQL, ~1-2 minutes
    python -m benchmarks.telemetry --database-url postgresql://... --ops 3000

Three ways of running the same calls on the same service:

- ``untraced``: the repository methods without memsvc's telemetry wrapper
  (what memsvc cost before telemetry existed);
- ``api only``: the wrapper with OpenTelemetry's no-op API (no SDK: the
  default for an app that does not configure OpenTelemetry);
- ``sdk``: the SDK installed and recording every span (sampled, batched to a
  discarding exporter) and every duration in a histogram; ``--sampled 0.01``
  samples one trace in a hundred instead, as busy services do.

On a small shared machine a burst of someone else's work lasts longer than
a call, so the modes take turns call by call (the order rotating, so none
always follows another) and are compared round by round: a round is
``--round`` calls of each mode, its ratio is ops/s of the mode over ops/s of
``untraced`` in that round, and the figure is the median of the rounds'
ratios, printed with their quartiles. Two steadier estimates follow: the
median difference between a call and its untraced partner of the same turn
(a stall hits one call, of either mode, so it cancels out), and the client's
CPU time per call (every thread of the process, the span exporter's
included), which is the overhead itself: the SDK's work runs on the event
loop between awaits. Both are turned into ratios as untraced ms/call over the
same plus the added time. The target is ``sdk`` >= 0.95x for ``add`` and
``search``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from benchmarks.scratch import scratch_dir
from memsvc import MemoryService, Scope, Settings, telemetry
from memsvc.db.embedded import EmbeddedPostgres
from memsvc.memories.repository import MemoryRepository

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


TARGET = 0.95


def quartiles(values: list[float]) -> tuple[float, float, float]:
    low, middle, high = statistics.quantiles(values, n=4)
    return low, middle, high


async def run(dsn: str, ops: int, round_size: int, sampled: float) -> None:
    settings = Settings(database_url=dsn, auto_migrate=True, pool_max_size=4)
    exporter = DiscardingExporter()
    sdk_traces = TracerProvider(sampler=ParentBased(TraceIdRatioBased(sampled)))
    sdk_traces.add_span_processor(BatchSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    sdk_metrics = MeterProvider(metric_readers=[reader])
    modes: dict[str, tuple[Any, Any, bool]] = {
        "untraced": (trace.NoOpTracerProvider(), metrics.NoOpMeterProvider(), False),
        "api only": (None, None, True),  # the global providers, which no one set
        "sdk": (sdk_traces, sdk_metrics, True),
    }
    order = list(modes)
    rounds = max(ops // round_size, 4)
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
                for i in range(20):
                    await call(i)

        print(
            f"{rounds * round_size:,} calls per mode in {rounds} rounds of {round_size}, "
            f"modes taking turns call by call; {SCOPE_ROWS:,}-row scope (+ the adds)"
        )
        verdicts = []
        for operation in ("add", "search"):
            gc.collect()
            cpu = {mode: 0.0 for mode in modes}
            latencies: dict[str, list[float]] = {mode: [] for mode in modes}
            ratios: dict[str, list[float]] = {mode: [] for mode in modes}
            call_number = 0
            for _ in range(rounds):
                spent = {mode: 0.0 for mode in modes}
                for _ in range(round_size):
                    turn = call_number % len(order)
                    for mode in order[turn:] + order[:turn]:
                        tracer_provider, meter_provider, _ = modes[mode]
                        telemetry.configure(
                            tracer_provider=tracer_provider, meter_provider=meter_provider
                        )
                        started, used = time.perf_counter(), time.process_time()
                        await by_mode[mode][operation](call_number)
                        latency = time.perf_counter() - started
                        cpu[mode] += time.process_time() - used
                        spent[mode] += latency
                        latencies[mode].append(latency)
                    call_number += 1
                for mode in modes:
                    ratios[mode].append(spent["untraced"] / spent[mode])
            calls_made = rounds * round_size
            ms = {mode: sum(latencies[mode]) / calls_made * 1e3 for mode in modes}
            us = {mode: cpu[mode] / calls_made * 1e6 for mode in modes}
            print(
                f"{operation}: ms/call {ms['untraced']:.2f} untraced, {ms['api only']:.2f} "
                f"api only, {ms['sdk']:.2f} sdk; client CPU us/call {us['untraced']:.0f}, "
                f"{us['api only']:.0f}, {us['sdk']:.0f}"
            )
            for mode in ("api only", "sdk"):
                low, ratio, high = quartiles(ratios[mode])
                # A stall hits one call, of any mode: the median of the calls'
                # differences to their untraced partner is the added time,
                # and the burst that lands on one side cancels out.
                shift = statistics.median(
                    traced - plain
                    for traced, plain in zip(latencies[mode], latencies["untraced"], strict=True)
                )
                paired = ms["untraced"] / (ms["untraced"] + shift * 1e3)
                # The SDK's work runs on the event loop between awaits, so a
                # call is longer by about the CPU it adds: the steadiest figure.
                added = (us[mode] - us["untraced"]) / 1e3
                by_cpu = ms["untraced"] / (ms["untraced"] + added)
                print(
                    f"  {mode + ':':<9} rounds {ratio:.3f}x [quartiles {low:.3f}-{high:.3f}], "
                    f"paired calls {paired:.3f}x ({shift * 1e6:+.0f} us), "
                    f"CPU {by_cpu:.3f}x ({added * 1e3:+.0f} us)",
                    flush=True,
                )
                if mode == "sdk":
                    verdicts.append(f"{operation} {ratio:.3f}x / {paired:.3f}x / {by_cpu:.3f}x")
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
        f"sdk vs target {TARGET}x (rounds / paired calls / CPU): "
        + ", ".join(verdicts)
        + f"; share of traces sampled: {sampled:g}"
    )
    print(f"the sdk exported {exporter.exported:,} spans, {points} metric points")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", help="PostgreSQL with pgvector (default: embedded)")
    parser.add_argument("--ops", type=int, default=1500, help="calls per mode (default 1500)")
    parser.add_argument("--round", type=int, default=50, help="calls per mode and round")
    parser.add_argument(
        "--sampled", type=float, default=1.0, help="share of traces sampled (default 1: all)"
    )
    args = parser.parse_args()
    if args.database_url:
        asyncio.run(run(args.database_url, args.ops, args.round, args.sampled))
        return
    embedded = EmbeddedPostgres(scratch_dir("memsvc-bench-"))
    try:
        asyncio.run(run(embedded.start(), args.ops, args.round, args.sampled))
    finally:
        embedded.close()


if __name__ == "__main__":
    main()
