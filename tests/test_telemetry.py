"""Telemetry: spans nest under the app's, carry identifiers not content; metrics are recorded.

Runs with the OpenTelemetry SDK's in-memory exporter and reader, given to
memsvc through ``memsvc.telemetry.configure`` (the global tracer provider can
be set only once per process), against the suite's real PostgreSQL and Redis.
"""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from memsvc import HashingEmbedder, MemoryService, Scope, Settings, ValidationError, telemetry
from memsvc.sync import SyncMemoryService

SECRET = "the launch code is tangerine-7741"
SECRET_VALUE = "violet-umbrella-0042"
SECRET_NUMBER = 0.0123456789


@dataclass
class Recorded:
    """What the SDK received from memsvc during one test."""

    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider

    def spans(self, prefix: str = "memsvc.") -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith(prefix)]

    def span(self, name: str) -> ReadableSpan:
        found = [s for s in self.exporter.get_finished_spans() if s.name == name]
        assert len(found) == 1, f"expected one {name} span, got {len(found)}"
        return found[0]

    def metrics(self) -> dict[str, list[Any]]:
        """Data points by metric name, from one collection."""
        points: dict[str, list[Any]] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else []:
            for scope_metrics in resource.scope_metrics:
                for metric in scope_metrics.metrics:
                    points.setdefault(metric.name, []).extend(metric.data.data_points)
        return points


@pytest.fixture
def recorded() -> Iterator[Recorded]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    telemetry.configure(tracer_provider=tracer_provider, meter_provider=meter_provider)
    yield Recorded(exporter, reader, tracer_provider)
    telemetry.configure()
    meter_provider.shutdown()
    tracer_provider.shutdown()


def _every_attribute_value(recorded: Recorded) -> list[str]:
    """Every attribute value, status text and event text memsvc exported, as strings."""
    values: list[str] = []
    for span in recorded.spans():
        values.append(span.name)
        values += [repr(v) for v in (span.attributes or {}).values()]
        values.append(str(span.status.description))
        for event in span.events:
            values.append(event.name)
            values += [repr(v) for v in (event.attributes or {}).values()]
    for points in recorded.metrics().values():
        for point in points:
            values += [repr(v) for v in (point.attributes or {}).values()]
    return values


async def test_operation_spans_nest_under_the_application_span(
    service: MemoryService, scope: Scope, recorded: Recorded
) -> None:
    app = recorded.tracer_provider.get_tracer("app")
    with app.start_as_current_span("handle request") as request:
        memory = await service.memories.add(scope, "the user prefers metric units")
        await service.memories.add(scope.with_session("s-43"), "another session")
        hits = await service.memories.search(
            Scope("acme", "bridge"), "metric units", k=7, include="descendants"
        )
        await service.memories.get(memory.id)

    parent = request.get_span_context()
    spans = recorded.spans()
    assert [s.name for s in spans] == [
        "memsvc.memories.add",
        "memsvc.memories.add",
        "memsvc.memories.search",
        "memsvc.memories.get",
    ]
    for span in spans:
        assert span.parent is not None and span.parent.span_id == parent.span_id
        assert span.context.trace_id == parent.trace_id
    add = spans[0].attributes or {}
    assert add["memsvc.tenant"] == "acme"
    assert add["memsvc.scope.level"] == "session"
    search = recorded.span("memsvc.memories.search").attributes or {}
    assert search["memsvc.tenant"] == "acme"
    assert search["memsvc.scope.level"] == "project"
    assert search["memsvc.k"] == 7
    assert search["memsvc.include"] == "descendants"
    assert search["memsvc.plan"] == "auto"
    assert "memsvc.mode" not in search  # not passed: the service picked it
    assert search["memsvc.rows"] == len(hits) == 2


async def test_an_operation_inside_another_is_its_child(
    service: MemoryService, scope: Scope, recorded: Recorded
) -> None:
    working = service.working(scope)
    await working.set("draft", {"step": 1})
    await working.create_checkpoint("before edit")

    outer = recorded.span("memsvc.working.create_checkpoint")
    inner = recorded.span("memsvc.checkpoints.create")
    assert inner.parent is not None and inner.parent.span_id == outer.context.span_id
    assert outer.parent is None  # no application span here: memsvc's is the root
    attributes = recorded.span("memsvc.working.set").attributes or {}
    assert attributes["memsvc.tenant"] == "acme"
    assert attributes["memsvc.scope.level"] == "session"

    assert len(await working.list_checkpoints(limit=5)) == 1
    assert (recorded.span("memsvc.working.list_checkpoints").attributes or {})["memsvc.limit"] == 5
    assert await service.checkpoints.prune(scope, 0) == 1
    prune = recorded.span("memsvc.checkpoints.prune").attributes or {}
    assert prune["memsvc.keep_last"] == 0
    assert prune["memsvc.rows"] == 1


async def test_no_content_metadata_or_embedding_reaches_any_attribute(
    service: MemoryService, scope: Scope, recorded: Recorded
) -> None:
    vector = np.full(384, SECRET_NUMBER, dtype=np.float32)
    memory = await service.memories.add(
        scope, SECRET, embedding=vector, metadata={"note": SECRET_VALUE}
    )
    await service.memories.search(scope, vector, k=3, where={"note": SECRET_VALUE})
    await service.memories.update(memory.id, content=SECRET + " (edited)")
    await service.memories.patch_metadata(memory.id, {"other": SECRET_VALUE})
    await service.memories.put(scope, "k1", SECRET + " keyed")
    await service.assemblies.create(scope, "group", memory_ids=[memory.id], description=SECRET)
    working = service.working(scope)
    await working.set("draft", SECRET_VALUE)
    await working.append_scratchpad(SECRET)
    await service.checkpoints.create(scope, {"state": SECRET})
    # Bad values are never echoed either: they could be anything the caller passed.
    with pytest.raises(ValidationError):
        await service.memories.search(scope, vector, include=SECRET)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        await service.memories.add(scope, SECRET + "\x00")

    values = _every_attribute_value(recorded)
    assert len(recorded.spans()) >= 11
    for value in values:
        assert "tangerine" not in value
        assert SECRET_VALUE not in value
        assert "0.0123456" not in value
    # And nothing that looks like a vector.
    for span in recorded.spans():
        for attribute in (span.attributes or {}).values():
            assert not isinstance(attribute, tuple | list) or len(attribute) < 8


async def test_a_failure_records_its_error_class_and_outcome(
    service: MemoryService, scope: Scope, recorded: Recorded
) -> None:
    with pytest.raises(ValidationError):
        await service.memories.add(scope, "wrong size", embedding=[0.5, 0.5, 0.5])

    span = recorded.span("memsvc.memories.add")
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "ValidationError"
    attributes = span.attributes or {}
    assert attributes["error.type"] == "ValidationError"
    assert attributes["memsvc.error.field"] == "embedding"
    assert "memsvc.rows" not in attributes
    assert not span.events  # no exception event: its message may quote the input

    durations = recorded.metrics()["memsvc.operation.duration"]
    failed = [
        p
        for p in durations
        if p.attributes["memsvc.operation"] == "memsvc.memories.add"
        and p.attributes["memsvc.outcome"] == "error"
    ]
    assert len(failed) == 1 and failed[0].count == 1
    assert failed[0].attributes["error.type"] == "ValidationError"


async def test_duration_histogram_by_operation_and_outcome(
    service: MemoryService, scope: Scope, recorded: Recorded
) -> None:
    for i in range(3):
        await service.memories.add(scope, f"memory {i}")
    await service.memories.search(scope, "memory", k=2)

    points = {
        (p.attributes["memsvc.operation"], p.attributes["memsvc.outcome"]): p
        for p in recorded.metrics()["memsvc.operation.duration"]
    }
    assert points[("memsvc.memories.add", "ok")].count == 3
    assert points[("memsvc.memories.search", "ok")].count == 1
    add = points[("memsvc.memories.add", "ok")]
    assert 0 < add.sum < 30
    # Seconds-sized buckets, not the SDK's default milliseconds-sized ones.
    assert add.explicit_bounds[0] < 0.01


def test_sync_client_spans_nest_under_the_calling_threads_span(
    settings: Settings, scope: Scope, recorded: Recorded
) -> None:
    app = recorded.tracer_provider.get_tracer("app")
    with SyncMemoryService.open(settings, embedder=HashingEmbedder()) as sync_service:
        parents: dict[str, int] = {}

        def tool(name: str) -> None:
            with app.start_as_current_span(name) as span:
                parents[name] = span.get_span_context().span_id
                sync_service.memories.add(scope, f"written by {name}")
                sync_service.working(scope).append_scratchpad(f"{name} was here")

        threads = [threading.Thread(target=tool, args=(f"tool-{i}",)) for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    by_parent: dict[int, list[str]] = {}
    for span in recorded.spans():
        if span.name == "memsvc.memories.add" or span.name == "memsvc.working.append_scratchpad":
            assert span.parent is not None
            by_parent.setdefault(span.parent.span_id, []).append(span.name)
    assert set(by_parent) == set(parents.values())
    for names in by_parent.values():
        assert sorted(names) == ["memsvc.memories.add", "memsvc.working.append_scratchpad"]


async def test_pool_gauges_count_connections_in_use_idle_and_waiting(
    service: MemoryService, scope: Scope, recorded: Recorded
) -> None:
    def pool_points() -> tuple[dict[str, int], int]:
        metrics = recorded.metrics()
        states = {p.attributes["state"]: p.value for p in metrics["memsvc.pool.connections"]}
        (waiting,) = metrics["memsvc.pool.waiting"]
        return states, waiting.value

    await service.memories.add(scope, "warm up")
    states, waiting = pool_points()
    assert states["in_use"] == 0
    assert states["idle"] == service.pool.get_size() >= 1
    assert waiting == 0

    pool = service.pool
    held = [await pool.acquire() for _ in range(pool.get_max_size())]
    try:
        blocked = asyncio.create_task(service.memories.add(scope, "waits for a connection"))
        for _ in range(100):
            await asyncio.sleep(0.01)
            states, waiting = pool_points()
            if waiting == 1:
                break
        assert waiting == 1
        assert states["in_use"] == pool.get_max_size()
        assert states["idle"] == 0
    finally:
        for conn in held:
            await pool.release(conn)
    await blocked
    assert pool_points()[1] == 0


async def test_working_store_gauge_names_the_backend_and_fallback(
    settings: Settings, scope: Scope, redis_url: str, recorded: Recorded
) -> None:
    async with MemoryService.open(
        settings.model_copy(update={"redis_url": redis_url}), embedder=HashingEmbedder()
    ) as on_redis:
        working = on_redis.working(scope)
        await working.set("draft", {"step": 1})
        assert await working.get("draft") == {"step": 1}
        stores = [
            p.attributes
            for p in recorded.metrics()["memsvc.working.store"]
            if p.attributes["backend"] == "redis"
        ]
        assert len(stores) == 1
        assert stores[0]["fallback"] is False
    span = recorded.span("memsvc.working.set")
    assert (span.attributes or {})["memsvc.tenant"] == "acme"
    # A closed service is no longer reported.
    after = recorded.metrics().get("memsvc.working.store", [])
    assert not [p for p in after if p.attributes["backend"] == "redis" and p.value]


async def test_gc_and_import_count_their_rows(
    service: MemoryService, scope: Scope, recorded: Recorded, tmp_path: Path
) -> None:
    memories = await service.memories.add_many(scope, [f"memory {i}" for i in range(5)])
    out = io.StringIO()
    await service.maintenance.export(out)
    export = tmp_path / "export.jsonl"
    export.write_text(out.getvalue())
    await service.pool.execute(
        f"UPDATE {service.settings.db_schema}.memories "
        "SET expires_at = now() - interval '1 second' WHERE id = ANY($1::uuid[])",
        [m.id for m in memories[:3]],
    )

    report = await service.maintenance.gc()
    assert report.expired_deleted == 3
    await service.maintenance.import_file(export)

    metrics = recorded.metrics()
    gc_rows = {p.attributes["kind"]: p.value for p in metrics["memsvc.gc.rows"]}
    assert gc_rows == {"expired_memories": 3}
    imported = {
        (p.attributes["kind"], p.attributes["outcome"]): p.value
        for p in metrics["memsvc.import.rows"]
    }
    assert imported == {("memories", "inserted"): 3, ("memories", "already_present"): 2}
    gc_span = recorded.span("memsvc.maintenance.gc")
    assert gc_span.status.status_code is StatusCode.UNSET


GLOBAL_PROVIDER_SCRIPT = """
import asyncio, json, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from memsvc import HashingEmbedder, MemoryService, Scope, Settings

async def main():
    settings = Settings(**json.loads(sys.argv[1]))
    async with MemoryService.open(settings, embedder=HashingEmbedder()) as svc:
        await svc.memories.add(Scope("acme"), "before the app set a provider")
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        with trace.get_tracer("app").start_as_current_span("request"):
            await svc.memories.add(Scope("acme"), "after")
        spans = [[s.name, s.parent is not None] for s in exporter.get_finished_spans()]
        print(json.dumps(spans))

asyncio.run(main())
"""


def test_the_global_provider_is_used_once_the_app_sets_it(settings: Settings) -> None:
    # A process of its own: the global tracer provider can be set only once.
    done = subprocess.run(
        [sys.executable, "-c", GLOBAL_PROVIDER_SCRIPT, settings.model_dump_json()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    spans = json.loads(done.stdout.strip().splitlines()[-1])
    # The add before the app set a provider made no span; the one after is
    # a child of the app's own.
    assert spans == [["memsvc.memories.add", True], ["request", False]]


async def test_a_bad_scope_argument_is_reported_by_the_operation_not_the_wrapper(
    service: MemoryService, recorded: Recorded
) -> None:
    with pytest.raises(ValidationError) as raised:
        await service.memories.add({"tenant": SECRET}, "content")  # type: ignore[arg-type]
    assert raised.value.field == "scope"
    attributes = recorded.span("memsvc.memories.add").attributes or {}
    assert "memsvc.tenant" not in attributes
    assert attributes["error.type"] == "ValidationError"


class _Operations:
    """Operations of the wrapper's own, so argument positions are the test's to choose."""

    async def search(
        self,
        scope: Scope,
        query: str,
        k: int = 10,
        *,
        include: str = "exact",
        mode: str | None = None,
        plan: str = "auto",
        limit: int | None = None,
    ) -> list[int]:
        return list(range(3))

    async def fail(self, tenant: str, error: str) -> None:
        raise {"LookupError": LookupError, "KeyError": KeyError}[error](SECRET)


telemetry.traced_operations("memsvc.test")(_Operations)


async def test_arguments_are_recorded_however_they_are_passed(recorded: Recorded) -> None:
    operations = _Operations()
    scope = Scope("acme", "bridge", "planner")
    await operations.search(
        scope, SECRET, 4, include="ancestors", mode="hybrid", plan="index", limit=2
    )
    await operations.search(query=SECRET, scope=scope, k=5)
    await operations.search(scope, SECRET)
    await operations.search(
        scope, SECRET, True, include=SECRET, mode=["exact"], plan=SECRET  # type: ignore[arg-type]
    )

    spans = recorded.spans("memsvc.test.search")
    assert [dict(s.attributes or {}) for s in spans] == [
        {
            "memsvc.tenant": "acme",
            "memsvc.scope.level": "agent",
            "memsvc.k": 4,
            "memsvc.limit": 2,
            "memsvc.include": "ancestors",
            "memsvc.mode": "hybrid",
            "memsvc.plan": "index",
            "memsvc.rows": 3,
        },
        {
            "memsvc.tenant": "acme",
            "memsvc.scope.level": "agent",
            "memsvc.k": 5,
            "memsvc.include": "exact",
            "memsvc.plan": "auto",
            "memsvc.rows": 3,
        },
        {
            "memsvc.tenant": "acme",
            "memsvc.scope.level": "agent",
            "memsvc.k": 10,
            "memsvc.include": "exact",
            "memsvc.plan": "auto",
            "memsvc.rows": 3,
        },
        # A bool is no count, and a value that is not a documented choice is
        # never echoed (it could be anything the caller passed).
        {"memsvc.tenant": "acme", "memsvc.scope.level": "agent", "memsvc.rows": 3},
    ]
    # Success leaves the status unset, as OpenTelemetry's instrumentations do.
    assert {s.status.status_code for s in spans} == {StatusCode.UNSET}


async def test_each_error_class_is_its_own_duration_series(recorded: Recorded) -> None:
    operations = _Operations()
    for error in ("LookupError", "KeyError", "LookupError"):
        with pytest.raises(LookupError):
            await operations.fail("acme", error)

    durations = recorded.metrics()["memsvc.operation.duration"]
    counts = {
        p.attributes["error.type"]: p.count
        for p in durations
        if p.attributes["memsvc.operation"] == "memsvc.test.fail"
    }
    assert counts == {"LookupError": 2, "KeyError": 1}
    assert {p.attributes["memsvc.outcome"] for p in durations} == {"error"}
    spans = recorded.spans("memsvc.test.fail")
    assert [(s.attributes or {})["error.type"] for s in spans] == [
        "LookupError",
        "KeyError",
        "LookupError",
    ]
    assert all((s.attributes or {})["memsvc.tenant"] == "acme" for s in spans)
    assert SECRET not in _every_attribute_value(recorded)


async def test_a_duration_exemplar_points_at_its_operation_span(recorded: Recorded) -> None:
    await _Operations().search(Scope("acme"), "query")

    span = recorded.span("memsvc.test.search")
    (point,) = [
        p
        for p in recorded.metrics()["memsvc.operation.duration"]
        if p.attributes["memsvc.operation"] == "memsvc.test.search"
    ]
    assert [(e.trace_id, e.span_id) for e in point.exemplars] == [
        (span.context.trace_id, span.context.span_id)
    ]
