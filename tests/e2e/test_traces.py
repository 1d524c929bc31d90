"""Traces end to end: a cluster whose CLI, master and agent export to an OTLP/HTTP receiver of
the test's own (OTEL_EXPORTER_OTLP_ENDPOINT), and one experiment whose trace runs from the CLI
through the API, the experiment and trial workflows and `run_trial` into the training
process's first metric report; plus the master's and the agent's OpenTelemetry metrics.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.e2e.cluster import DIGITS, Cluster, created_id, shared_servers_cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Span:
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    service: str


class Receiver:
    """An OTLP/HTTP receiver (protobuf) keeping every span and metric name it is sent."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.metrics: set[str] = set()
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path == "/v1/traces":
                    receiver.take_traces(body)
                elif self.path == "/v1/metrics":
                    receiver.take_metrics(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def take_traces(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        found = []
        for resource_spans in request.resource_spans:
            service = next((a.value.string_value for a in resource_spans.resource.attributes
                            if a.key == "service.name"), "")
            for scope in resource_spans.scope_spans:
                found += [Span(s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(),
                               s.name, service) for s in scope.spans]
        with self.lock:
            self.spans += found

    def take_metrics(self, body: bytes) -> None:
        request = ExportMetricsServiceRequest.FromString(body)
        names = {m.name for rm in request.resource_metrics for sm in rm.scope_metrics
                 for m in sm.metrics}
        with self.lock:
            self.metrics |= names


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    r.thread.start()
    yield r
    r.server.shutdown()


@pytest.fixture(scope="module")
def cluster(postgres_url: str, temporal_address: str, receiver: Receiver) -> Iterator[Cluster]:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "200",
           "OTEL_METRIC_EXPORT_INTERVAL": "1000"}
    with shared_servers_cluster(postgres_url, temporal_address, "traces", "--slots", "1",
                                env_extra=env) as c:
        yield c


def test_one_trace_follows_an_experiment_into_the_training_process(
    cluster: Cluster, receiver: Receiver
) -> None:
    result = cluster.run("experiment", "create", str(DIGITS / "single.yaml"), str(DIGITS),
                         "--follow", timeout=300)
    created_id(result.stdout)

    def trace() -> list[Span] | None:
        with receiver.lock:
            spans = list(receiver.spans)
        submits = [s for s in spans if s.name == "POST /api/v1/experiments"]
        if not submits:
            return None
        mine = [s for s in spans if s.trace_id == submits[-1].trace_id]
        names = {s.name for s in mine}
        wanted = {"RunActivity:run_trial", "POST /api/v1/trials/{trial_id}/metrics/batch"}
        return mine if wanted <= names else None

    spans = wait_for(trace, timeout=60, what="the experiment's trace")
    by_id = {s.span_id: s for s in spans}

    def one(name: str, service: str) -> Span:
        found = [s for s in spans if s.name == name and s.service == service]
        assert found, (name, service, sorted({(s.name, s.service) for s in spans}))
        return found[0]

    def ancestors(span: Span) -> list[str]:
        names = []
        while span.parent_id and span.parent_id in by_id:
            span = by_id[span.parent_id]
            names.append(span.name)
        return names

    submit = one("POST /api/v1/experiments", "epochal-master")
    assert ancestors(submit)[-1] == "epochal experiment create"  # the CLI's span is the root
    assert one("epochal experiment create", "epochal-cli").parent_id == ""
    experiment = one("RunWorkflow:ExperimentWorkflow", "epochal-master")
    assert "POST /api/v1/experiments" in ancestors(experiment)
    # Temporal's interceptor parents a workflow's spans on the context it was started with.
    # The experiment starts each trial as its child workflow, whose start's span the trial's
    # workflow hangs from.
    trial = one("RunWorkflow:TrialWorkflow", "epochal-master")
    started_by = ["StartChildWorkflow:TrialWorkflow", "StartWorkflow:ExperimentWorkflow"]
    assert ancestors(trial)[:2] == started_by
    run = one("RunActivity:run_trial", "epochal-agent")
    assert ancestors(run)[:3] == ["StartActivity:run_trial", *started_by]
    # The training process sent TRACEPARENT back with its reports: the master's span of its
    # first metric report is a child of the agent's run_trial span.
    reports = [s for s in spans if s.name == "POST /api/v1/trials/{trial_id}/metrics/batch"
               and s.service == "epochal-master"]
    assert reports and all(s.parent_id == run.span_id for s in reports)
    assert any(s.name == "INSERT" and "POST /api/v1/trials/{trial_id}/metrics/batch"
               in ancestors(s) for s in spans)  # the API's write, traced by asyncpg's

    wait_for(lambda: {"epochal.metric.reports", "epochal.trial.runs", "epochal.checkpoints",
                      "epochal.pool.queue_length", "epochal.pool.slots_used"}
             <= receiver.metrics, timeout=30, what="the master's and agent's metrics")
