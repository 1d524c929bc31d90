"""Traces and metrics through OpenTelemetry, for the master, the agent and the CLI.

Off unless asked for, and then configured by the standard variables: `OTEL_TRACES_EXPORTER`
(`otlp`, `console` or `none`), `OTEL_EXPORTER_OTLP_ENDPOINT` / `..._TRACES_ENDPOINT` (any OTLP/HTTP
collector: Jaeger, Tempo, ...), `OTEL_SERVICE_NAME`, `OTEL_BSP_*`, `OTEL_SDK_DISABLED`; and
Epochal's `EPOCHAL_TRACES_FILE` (spans as JSON lines in a file: `epochal cluster up --traces`).
Off, nothing of OpenTelemetry is imported and nothing is wrapped.

One trace follows an experiment from the CLI through the API (FastAPI's and asyncpg's
instrumentations), the experiment and trial workflows and their activities (Temporal's
TracingInterceptor carries the context in workflow and activity headers), the agent's
`run_trial`, into the training process (`TRACEPARENT` in its environment), whose reports carry it
back to the API (the harness sends it as the W3C `traceparent` header).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterator, MutableMapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.sdk.trace.sampling import Sampler
    from temporalio.client import Interceptor

FILE_ENV = "EPOCHAL_TRACES_FILE"
# What the agent puts in a training process's environment (the harness sends it back).
TRACEPARENT_ENV = "TRACEPARENT"

_enabled = False


def wanted() -> bool:
    """Whether the environment asks for traces."""
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    exporters = {e.strip() for e in env.get("OTEL_TRACES_EXPORTER", "").split(",") if e.strip()}
    if exporters == {"none"}:
        return False
    return bool(exporters or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(FILE_ENV))


def enabled() -> bool:
    return _enabled


def setup(service: str) -> bool:
    """Install the tracer and meter providers for this process (`service` unless
    OTEL_SERVICE_NAME names it); False, and nothing done, when traces are not asked for."""
    global _enabled
    if _enabled or not wanted():
        return _enabled
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or service})
    sampler = None if os.environ.get("OTEL_TRACES_SAMPLER") else _report_sampler()
    provider = TracerProvider(resource=resource, sampler=sampler)
    exporters = {e.strip() for e in os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")}
    otlp = "otlp" in exporters and bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                                       or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
    if otlp:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=[
            PeriodicExportingMetricReader(OTLPMetricExporter())]))
    if "console" in exporters:
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    if os.environ.get(FILE_ENV):
        provider.add_span_processor(BatchSpanProcessor(_file_exporter(os.environ[FILE_ENV])))
    trace.set_tracer_provider(provider)
    _enabled = True
    return True


# Routes a trial calls many times a second (its reports, its preemption poll, its agent's log
# posts): of each trace, the first REPORTS_IN_FULL are traced, then one a second.
REPORT_ROUTES = re.compile(
    r"(POST /api/v1/trials/\{trial_id\}/(metrics|metrics/batch|progress)"
    r"|POST /api/v1/task/logs|GET /api/v1/allocations/\{allocation_id\}/signals/preemption)$")
REPORTS_IN_FULL = 10


@contextmanager
def untraced() -> Iterator[None]:
    """No spans from instrumentations inside the block (a poll's repeated queries)."""
    if not _enabled:
        yield
        return
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    with suppress_instrumentation():
        yield


def _report_sampler() -> Sampler:
    """Every span (as its parent decides, else sampled), except the high-rate report routes,
    whose spans are sampled per trace: the first REPORTS_IN_FULL, then at most one a second
    (a trial's trace stays readable, and ingestion stays as fast; set OTEL_TRACES_SAMPLER to
    trace everything another way)."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace.sampling import (
        ALWAYS_ON,
        Decision,
        ParentBased,
        Sampler,
        SamplingResult,
    )

    class ReportSampler(Sampler):
        def __init__(self) -> None:
            self._inner = ParentBased(ALWAYS_ON)
            self._seen: dict[Any, tuple[int, float]] = {}
            self._lock = threading.Lock()

        def should_sample(self, parent_context: Any, trace_id: int, name: str,
                          kind: Any = None, attributes: Any = None, links: Any = None,
                          trace_state: Any = None) -> SamplingResult:
            if not REPORT_ROUTES.match(name):
                return self._inner.should_sample(parent_context, trace_id, name, kind,
                                                 attributes, links, trace_state)
            parent = trace.get_current_span(parent_context).get_span_context()
            key = trace_id if parent.is_valid else name
            now = time.monotonic()
            with self._lock:
                count, last = self._seen.pop(key, (0, 0.0))
                keep = count < REPORTS_IN_FULL or now - last >= 1.0
                self._seen[key] = (count + 1, now if keep else last)
                while len(self._seen) > 10_000:
                    self._seen.pop(next(iter(self._seen)))
            if not keep:
                return SamplingResult(Decision.DROP)
            return self._inner.should_sample(parent_context, trace_id, name, kind,
                                             attributes, links, trace_state)

        def get_description(self) -> str:
            return "ReportSampler"

    return ReportSampler()


def temporal_interceptors() -> list[Interceptor]:
    """Temporal's tracing interceptor for a client (and the workers made from it), if on."""
    if not _enabled:
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [TracingInterceptor()]


def instrument_api(app: FastAPI) -> None:
    """Spans for the API's requests and its database calls, if on."""
    if not _enabled:
        return
    from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
    from opentelemetry.metrics import NoOpMeterProvider

    # Not a span per body chunk sent or received: a request's span says what it did; no HTTP
    # histograms per request either (Epochal's own counters say what a user watches).
    FastAPIInstrumentor.instrument_app(app, excluded_urls="health,static",
                                       exclude_spans=["receive", "send"],
                                       meter_provider=NoOpMeterProvider())
    instrumentor = AsyncPGInstrumentor()  # type: ignore[no-untyped-call]
    if not instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.instrument()


def traceparent() -> str | None:
    """The current span as a W3C traceparent value (for a training process), if on."""
    if not _enabled:
        return None
    from opentelemetry.propagate import inject

    carrier: dict[str, str] = {}
    inject(carrier)
    return carrier.get("traceparent")


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current context's propagation headers (a CLI request), if on."""
    if _enabled:
        from opentelemetry.propagate import inject as propagate

        propagate(headers)


@contextmanager
def span(name: str, **attributes: Any) -> Iterator[None]:
    """A span around a block, if on (else nothing)."""
    if not _enabled:
        with nullcontext():
            yield
        return
    from opentelemetry import trace

    with trace.get_tracer("epochal").start_as_current_span(name, attributes=attributes):
        yield


_counters: dict[str, Any] = {}
_gauge_values: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}


def count(name: str, amount: int = 1, **attributes: str) -> None:
    """Add to an OpenTelemetry counter (`epochal.trial.runs`, ...), if on."""
    if not _enabled:
        return
    instrument = _counters.get(name)
    if instrument is None:
        from opentelemetry import metrics

        instrument = _counters[name] = metrics.get_meter("epochal").create_counter(name)
    instrument.add(amount, attributes)


def gauge(name: str, values: dict[tuple[tuple[str, str], ...], float]) -> None:
    """Set an observable gauge's current values, each under its attributes, if on; the meter
    reads them at its own pace (a value set here stays until set again)."""
    if not _enabled:
        return
    if name not in _gauge_values:
        from opentelemetry import metrics
        from opentelemetry.metrics import CallbackOptions, Observation

        def observe(_options: CallbackOptions, name: str = name) -> list[Observation]:
            return [Observation(v, dict(k)) for k, v in _gauge_values[name].items()]

        metrics.get_meter("epochal").create_observable_gauge(name, callbacks=[observe])
    _gauge_values[name] = dict(values)


def _file_exporter(path: str) -> SpanExporter:
    """An exporter writing finished spans as one JSON object per line, appended to `path`."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    lock = threading.Lock()

    class FileExporter(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            lines = "".join(json.dumps(json.loads(s.to_json()), separators=(",", ":")) + "\n"
                            for s in spans)
            with lock, open(path, "a", encoding="utf-8") as f:
                f.write(lines)
            return SpanExportResult.SUCCESS

    return FileExporter()
