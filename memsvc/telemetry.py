"""Tracing and metrics through the OpenTelemetry API.

memsvc depends only on ``opentelemetry-api``, which does nothing until the
application installs an SDK (``opentelemetry-sdk``) and sets its providers.
Then every public operation is one span (``memsvc.memories.search``,
``memsvc.working.set``, ...) nested under the caller's current span, and
its duration is recorded in a histogram. Spans carry identifiers and sizes
only (tenant, scope level, k, include, rows), never content, metadata values
or embeddings.

Use the global providers (the default), or give memsvc its own::

    memsvc.telemetry.configure(tracer_provider=provider, meter_provider=meters)

Repositories opt in with one class decorator,
``@traced_operations("memsvc.memories")``; the service registers its pool and
working-memory store with :func:`watch` for the observable gauges.
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
import itertools
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ParamSpec, Protocol, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation
from opentelemetry.trace import Span, Status, StatusCode, Tracer, TracerProvider
from opentelemetry.util.types import AttributeValue

from memsvc.core.scope import Scope

P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C", bound=type)

INSTRUMENTATION_NAME = "memsvc"

# Operation durations are milliseconds to seconds; the SDK's default buckets
# (0, 5, 10, 25 ...) assume milliseconds and would put every call in one.
DURATION_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)

# Durations wait in a queue and reach the histogram this many at a time, or
# whenever a metric reader collects. The SDK's record path is long (views,
# attribute hashing, aggregation, exemplars); run once between two database
# round trips it finds none of its code or data in the CPU's caches and costs
# several times what it costs in a loop. Flushing in batches keeps it warm.
DURATION_BATCH = 128

# Arguments recorded on spans, by parameter name. Strings only when they are
# one of the documented choices: a bad value could be anything the caller
# passed (content included), so it is never echoed into telemetry.
_NUMBER_ARGUMENTS = {"k": "memsvc.k", "limit": "memsvc.limit", "keep_last": "memsvc.keep_last"}
_CHOICE_ARGUMENTS = {
    "include": ("memsvc.include", frozenset({"exact", "ancestors", "descendants"})),
    "mode": ("memsvc.mode", frozenset({"vector", "text", "hybrid"})),
    "plan": ("memsvc.plan", frozenset({"auto", "exact", "index"})),
    "rank": ("memsvc.rank", frozenset({"similarity", "recall"})),
}


def _version() -> str | None:
    try:
        return importlib.metadata.version("memsvc")
    except importlib.metadata.PackageNotFoundError:
        return None


class _Instruments:
    """The tracer and instruments of one pair of providers, created once."""

    def __init__(
        self, tracer_provider: TracerProvider | None, meter_provider: MeterProvider | None
    ) -> None:
        version = _version()
        self._version = version
        # With the global provider, tracing starts once the app sets a real
        # one (see global_tracing); until then a call costs no span at all.
        self._awaiting_global = tracer_provider is None
        # A provider named by the environment is loaded by the first
        # get_tracer_provider() call: global_tracing always makes that call
        # when the variable was set as memsvc's telemetry started.
        self.tracer: Tracer = trace.NoOpTracer()
        self.tracing = False
        if tracer_provider is not None:
            self.tracer = tracer_provider.get_tracer(INSTRUMENTATION_NAME, version)
            self.tracing = not isinstance(self.tracer, trace.NoOpTracer)
        meter: Meter
        if meter_provider is None:
            meter = metrics.get_meter(INSTRUMENTATION_NAME, version or "")
        else:
            meter = meter_provider.get_meter(INSTRUMENTATION_NAME, version or "")
        self.duration = meter.create_histogram(
            "memsvc.operation.duration",
            unit="s",
            description="Duration of memsvc operations, by operation and outcome",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.gc_rows = meter.create_counter(
            "memsvc.gc.rows", unit="{row}", description="Rows deleted by gc, by kind"
        )
        self.import_rows = meter.create_counter(
            "memsvc.import.rows",
            unit="{row}",
            description="Rows seen by imports, by kind and outcome",
        )
        self._durations: deque[
            tuple[float, dict[str, AttributeValue], otel_context.Context | None]
        ] = deque()
        meter.create_observable_gauge(
            "memsvc.pool.connections",
            # A collection sees every duration recorded before it: the SDK
            # runs the observable callbacks before it reads the histogram.
            callbacks=[self._flush_then_observe_pool_connections],
            unit="{connection}",
            description="Connections of memsvc's pool, by state (in_use, idle)",
        )
        meter.create_observable_gauge(
            "memsvc.pool.waiting",
            callbacks=[_observe_pool_waiting],
            unit="{request}",
            description="memsvc operations waiting for a pooled connection",
        )
        meter.create_observable_gauge(
            "memsvc.changes.stalled",
            callbacks=[_observe_feed_stalls],
            unit="s",
            description="How long change feeds have been held back behind one open "
            "transaction, by schema and holder (pid or prepared transaction); a feed "
            "appears once held back for change_stall_report_s",
        )
        meter.create_observable_gauge(
            "memsvc.working.store",
            callbacks=[_observe_working_store],
            description="1 for the working-memory store in use, by backend and fallback",
        )

    def record_duration(
        self,
        seconds: float,
        attributes: dict[str, AttributeValue],
        context: otel_context.Context | None,
    ) -> None:
        """Queue one operation's duration for the histogram (see DURATION_BATCH)."""
        self._durations.append((seconds, attributes, context))
        if len(self._durations) >= DURATION_BATCH:
            self.flush_durations()

    def flush_durations(self) -> None:
        """Record every queued duration (any thread: deque pops are atomic)."""
        durations = self._durations
        while True:
            try:
                seconds, attributes, context = durations.popleft()
            except IndexError:
                return
            self.duration.record(seconds, attributes, context)

    def _flush_then_observe_pool_connections(
        self, options: CallbackOptions
    ) -> Iterable[Observation]:
        self.flush_durations()
        return list(_observe_pool_connections(options))

    def global_tracing(self) -> bool:
        """Whether the global tracer provider has become a real one (then used directly).

        Checked per call only while the app has set none (OpenTelemetry's
        public ``get_tracer_provider()``, which reads the provider's environment
        variable each time): cheaper than a span of the proxy that leads nowhere.
        """
        if not self._awaiting_global:
            return False
        provider = trace.get_tracer_provider()
        if isinstance(provider, trace.ProxyTracerProvider):
            return False
        self.tracer = provider.get_tracer(INSTRUMENTATION_NAME, self._version)
        self.tracing = not isinstance(self.tracer, trace.NoOpTracer)
        self._awaiting_global = False
        return self.tracing


_instruments: _Instruments | None = None
_configured: dict[tuple[TracerProvider | None, MeterProvider | None], _Instruments] = {}


def _current() -> _Instruments:
    if _instruments is None:
        configure()
    assert _instruments is not None
    return _instruments


def configure(
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
) -> None:
    """Send memsvc's spans and metrics to these providers.

    Without arguments (the default), memsvc uses OpenTelemetry's global
    providers, including ones set after memsvc was imported. Pass providers
    when an app keeps several, or in tests (the global tracer provider can be
    set only once per process). Configuring the same providers again reuses
    their instruments (so gauges are not registered twice).
    """
    global _instruments
    key = (tracer_provider, meter_provider)
    instruments = _configured.get(key)
    if instruments is None:
        instruments = _configured[key] = _Instruments(tracer_provider, meter_provider)
    _instruments = instruments


# --------------------------------------------------------------------- spans


@dataclass(frozen=True, slots=True)
class _Argument:
    """Where a parameter of a traced method is found in a call, and what it records."""

    key: str  # the span attribute
    name: str
    position: int  # index in ``args`` (self is 0); past any call's end for keyword-only
    default: Any
    allowed: frozenset[str] | None  # the documented choices; None for a count


def _argument(
    signature: inspect.Signature, name: str, key: str, allowed: frozenset[str] | None = None
) -> _Argument | None:
    parameter = signature.parameters.get(name)
    if parameter is None:
        return None
    position = len(signature.parameters)  # never < len(args): read from kwargs
    if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
        position = list(signature.parameters).index(name)
    default = None if parameter.default is parameter.empty else parameter.default
    return _Argument(key, name, position, default, allowed)


def _value(argument: _Argument, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    if argument.position < len(args):
        return args[argument.position]
    return kwargs.get(argument.name, argument.default)


def _scope_attributes(scope: object, attributes: dict[str, AttributeValue]) -> None:
    if not isinstance(scope, Scope):
        return  # a bad argument: the operation reports it
    attributes["memsvc.tenant"] = scope.tenant
    if scope.session is not None:
        attributes["memsvc.scope.level"] = "session"
    elif scope.agent is not None:
        attributes["memsvc.scope.level"] = "agent"
    elif scope.project is not None:
        attributes["memsvc.scope.level"] = "project"
    else:
        attributes["memsvc.scope.level"] = "tenant"


# A tuple, not ``list | tuple | dict``: that union would be built on every call.
_SIZED = (list, tuple, dict)


def _rows(result: object) -> int | None:
    """Rows an operation returned (a list, a dict) or affected (a count)."""
    if isinstance(result, _SIZED):
        return len(result)
    if isinstance(result, int) and not isinstance(result, bool):
        return result
    return None


def _attributes_of_calls(
    signature: inspect.Signature, scope_attribute: str | None
) -> Callable[[tuple[Any, ...], Mapping[str, Any]], dict[str, AttributeValue]]:
    """The function giving a call's span attributes, with every lookup decided once."""
    scope_argument = _argument(signature, "scope", "memsvc.tenant")
    tenant_argument = _argument(signature, "tenant", "memsvc.tenant")
    arguments = tuple(
        argument
        for argument in (
            *(_argument(signature, name, key) for name, key in _NUMBER_ARGUMENTS.items()),
            *(
                _argument(signature, name, key, allowed)
                for name, (key, allowed) in _CHOICE_ARGUMENTS.items()
            ),
        )
        if argument is not None
    )

    def attributes_of(
        args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> dict[str, AttributeValue]:
        attributes: dict[str, AttributeValue] = {}
        if scope_argument is not None:
            _scope_attributes(_value(scope_argument, args, kwargs), attributes)
        elif scope_attribute is not None and args:
            _scope_attributes(getattr(args[0], scope_attribute, None), attributes)
        if tenant_argument is not None and "memsvc.tenant" not in attributes:
            tenant = _value(tenant_argument, args, kwargs)
            if isinstance(tenant, str):
                attributes["memsvc.tenant"] = tenant
        for argument in arguments:
            value = _value(argument, args, kwargs)
            if argument.allowed is None:
                # A count; bool is an int Python-wise, not a count.
                if isinstance(value, int) and not isinstance(value, bool):
                    attributes[argument.key] = value
            elif isinstance(value, str) and value in argument.allowed:
                attributes[argument.key] = value
        return attributes

    return attributes_of


def traced(
    name: str,
    *,
    scope_attribute: str | None = None,
    on_result: Callable[[Any], None] | None = None,
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """Make a coroutine method one span ``name`` and one duration measurement.

    The span records the call's tenant and scope level (from its ``scope`` or
    ``tenant`` argument, or the instance's ``scope_attribute``), ``k``,
    ``limit``, ``include``, ``mode``, ``plan`` and ``rank`` when the method has them,
    the number of rows returned, and the error class on failure.
    ``on_result`` is called with each successful result (metrics counters).
    """

    def decorate(method: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        attributes_of = _attributes_of_calls(inspect.signature(method), scope_attribute)
        # The duration's attributes, built once per outcome and reused: the SDK
        # copies and hashes them on every record, so a new dict per call is
        # pure cost. Error classes are few (memsvc's own, a driver's).
        ok: dict[str, AttributeValue] = {"memsvc.operation": name, "memsvc.outcome": "ok"}
        failed: dict[str, dict[str, AttributeValue]] = {}

        def failure_attributes(error: str) -> dict[str, AttributeValue]:
            attributes = failed.get(error)
            if attributes is None:
                attributes = failed[error] = {
                    "memsvc.operation": name,
                    "memsvc.outcome": "error",
                    "error.type": error,
                }
            return attributes

        @functools.wraps(method)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            instruments = _instruments or _current()
            span: Span | None = None
            context: otel_context.Context | None = None
            token: object = None
            if instruments.tracing or instruments.global_tracing():
                # The caller's context, looked up once: given to start_span,
                # it is the one the sampler and span processors read too
                # (each would look it up again), and the span's goes on it.
                parent = otel_context.get_current()
                # Attributes given at the start are the samplers' to see, and
                # cost the SDK one copy instead of a locked update per attribute.
                span = instruments.tracer.start_span(
                    name, parent, attributes=attributes_of(args, kwargs)
                )
                context = trace.set_span_in_context(span, parent)
                token = otel_context.attach(context)
            started = time.perf_counter()
            try:
                result = await method(*args, **kwargs)
            except BaseException as exc:
                error = type(exc).__name__
                # In the span's context (given, not looked up again): an
                # exemplar of the duration points at this operation's span.
                instruments.record_duration(
                    time.perf_counter() - started, failure_attributes(error), context
                )
                if span is not None:
                    # The class only: messages may quote what the caller passed.
                    failure: dict[str, AttributeValue] = {"error.type": error}
                    field_name = getattr(exc, "field", None)
                    if isinstance(field_name, str):
                        failure["memsvc.error.field"] = field_name
                    span.set_attributes(failure)
                    span.set_status(Status(StatusCode.ERROR, error))
                raise
            else:
                instruments.record_duration(time.perf_counter() - started, ok, context)
                if on_result is not None:
                    on_result(result)
                if span is not None:
                    # Success leaves the status unset (the OpenTelemetry
                    # convention for instrumentation): no Status object per call.
                    rows = _rows(result)
                    if rows is not None:
                        span.set_attribute("memsvc.rows", rows)
                return result
            finally:
                if span is not None:
                    otel_context.detach(token)  # type: ignore[arg-type]
                    span.end()

        return wrapper

    return decorate


def traced_operations(
    prefix: str,
    *,
    scope_attribute: str | None = None,
    exclude: Iterable[str] = (),
    on_result: Mapping[str, Callable[[Any], None]] | None = None,
) -> Callable[[C], C]:
    """Trace every public coroutine method of a class as ``<prefix>.<method>``.

    Args:
        prefix: The span name's prefix, e.g. ``memsvc.memories``.
        scope_attribute: The instance attribute holding the scope, for classes
            whose methods take none (working memory is bound to its session).
        exclude: Public methods that are not operations of their own (hooks
            other operations call within their transaction).
        on_result: Per method, a function given each successful result.
    """
    skipped = frozenset(exclude)
    hooks = dict(on_result or {})

    def decorate(cls: C) -> C:
        for method_name, member in list(vars(cls).items()):
            if (
                method_name.startswith("_")
                or method_name in skipped
                or not inspect.iscoroutinefunction(member)
            ):
                continue
            wrapped = traced(
                f"{prefix}.{method_name}",
                scope_attribute=scope_attribute,
                on_result=hooks.get(method_name),
            )(member)
            setattr(cls, method_name, wrapped)
        return cls

    return decorate


# --------------------------------------------------------------------- metrics


class _Store(Protocol):
    @property
    def backend(self) -> str: ...
    @property
    def using_fallback(self) -> bool: ...


class _Service(Protocol):
    @property
    def pool(self) -> Any: ...
    @property
    def working_store(self) -> _Store: ...


@dataclass(eq=False)
class _Watched:
    """An open service, as the observable gauges see it."""

    service: weakref.ref[_Service]
    attributes: dict[str, AttributeValue]
    waiting: int = 0


# By id(pool) (asyncpg pools take no weak references), so a waiting pool
# finds its entry; the service is held weakly, and a service dropped without
# close() leaves the gauges all the same.
_watched: dict[int, _Watched] = {}
_labels = itertools.count(1)


def watch(service: _Service, *, schema: str) -> None:
    """Report this service's pool and working-memory store in the gauges."""
    key = id(service.pool)

    def forget(ref: weakref.ref[_Service]) -> None:
        # Only its own entry: a later service's pool may have the same id.
        entry = _watched.get(key)
        if entry is not None and entry.service is ref:
            del _watched[key]

    label = str(next(_labels))
    _watched[key] = _Watched(
        weakref.ref(service, forget), {"memsvc.db_schema": schema, "memsvc.service": label}
    )


def unwatch(service: _Service) -> None:
    """Stop reporting a service (it closed)."""
    _watched.pop(id(service.pool), None)


@contextmanager
def waiting_for_connection(pool: object) -> Iterator[None]:
    """Count an operation waiting for a connection of a busy pool."""
    watched = _watched.get(id(pool))
    if watched is None:
        yield
        return
    watched.waiting += 1
    try:
        yield
    finally:
        watched.waiting -= 1


def _services() -> Iterator[tuple[_Service, _Watched]]:
    for watched in list(_watched.values()):
        service = watched.service()
        if service is not None:
            yield service, watched


def _observe_pool_connections(options: CallbackOptions) -> Iterable[Observation]:
    for service, watched in _services():
        pool = service.pool
        size, idle = pool.get_size(), pool.get_idle_size()
        yield Observation(size - idle, {**watched.attributes, "state": "in_use"})
        yield Observation(idle, {**watched.attributes, "state": "idle"})


def _observe_pool_waiting(options: CallbackOptions) -> Iterable[Observation]:
    for _, watched in _services():
        yield Observation(watched.waiting, watched.attributes)


def _observe_working_store(options: CallbackOptions) -> Iterable[Observation]:
    for service, watched in _services():
        store = service.working_store
        attributes = {
            **watched.attributes,
            "backend": store.backend,
            "fallback": store.using_fallback,
        }
        yield Observation(1, attributes)


def count_gc(deleted: Mapping[str, int]) -> None:
    """Add a gc run's deleted rows to ``memsvc.gc.rows``, by kind."""
    counter = _current().gc_rows
    for kind, rows in deleted.items():
        if rows:
            counter.add(rows, {"kind": kind})


def count_import(counts: Mapping[str, Mapping[str, int]]) -> None:
    """Add an import's rows to ``memsvc.import.rows``, by kind and outcome."""
    counter = _current().import_rows
    for kind, outcomes in counts.items():
        for outcome, rows in outcomes.items():
            if rows:
                counter.add(rows, {"kind": kind, "outcome": outcome})


# Change feeds held back past Settings.change_stall_report_s, by feed: since
# when (time.monotonic()) and the gauge's attributes.
_stalled_feeds: dict[int, tuple[float, dict[str, AttributeValue]]] = {}


def feed_stalled(feed: int, *, since: float, schema: str, holder: str) -> None:
    """Report feed ``feed`` held back since ``since`` (monotonic) by ``holder``."""
    _stalled_feeds[feed] = (since, {"memsvc.db_schema": schema, "memsvc.feed.holder": holder})


def feed_resumed(feed: int) -> None:
    """Feed ``feed`` is no longer held back (or has stopped)."""
    _stalled_feeds.pop(feed, None)


def _observe_feed_stalls(options: CallbackOptions) -> Iterable[Observation]:
    now = time.monotonic()
    longest: dict[tuple[tuple[str, AttributeValue], ...], tuple[float, dict[str, AttributeValue]]]
    longest = {}
    for since, attributes in list(_stalled_feeds.values()):
        key = tuple(sorted(attributes.items()))
        seconds = now - since
        if key not in longest or longest[key][0] < seconds:
            longest[key] = (seconds, attributes)
    for seconds, attributes in longest.values():
        yield Observation(seconds, attributes)
