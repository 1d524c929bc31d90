"""API read latency on a large database, and metric ingestion next to MLflow's tracking server.

Starts its own PostgreSQL (the embedded wheel, durable settings as a real cluster runs it) and
Temporal dev server in a temporary directory, seeds a fresh database with COPY, then starts the
real master (`python -m deploy.master`, uvicorn) on it and logs in as admin.

Seed: E experiments x T trials each (default 10 x 100 = 1,000 trials); every trial has P training
reports (steps 1..P, default 1,000) of 5 metrics, plus a validation report every 100 steps. Two
experiments are ACTIVE, the others COMPLETED with their best trial recorded (as the master does
when an experiment ends).

Reads, each as R sequential requests over one keep-alive connection (after a warm-up), p50/p99:
  - experiment list:   GET /api/v1/experiments?limit=100
  - experiment detail: GET /api/v1/experiments/{id} (a random experiment: T trials)
  - trials page:       GET /api/v1/experiments/{id}/trials?limit=100&offset=... (a random page),
                       by id and by best validation (what the dashboard's table asks)
  - trial curves:      GET /api/v1/trials/time-series?trialIds={id}&maxDatapoints=200 (what a
                       chart asks: every metric, downsampled), and with metricNames=loss (one
                       metric: per-bucket min/max)
  - full resolution:   GET /api/v1/trials/{id}/metrics?group=training&startBatches=250
                       &endBatches=750 (501 reports, not downsampled)

Ingestion, one writer each, same rows: S steps of 5 metrics, B steps per request (default 20,000
and 200, MLflow's largest log_batch: 1,000 values); both servers run throughout and the two
alternate in rounds (default 4 of S/4 steps, after an untimed round each, plus 1,000 steps,
--warm-up-steps, before each side's first round), so that the shared machine's changing load
falls on both alike:
  - Epochal: harness.core, the code trials run (its background sender posts batches of up to 200
    reports to POST /api/v1/trials/{id}/metrics/batch with a trial token); timed from the first
    report to the moment the context has closed, i.e. everything delivered and committed.
  - MLflow: `mlflow server` (1 worker, like Epochal's one master process) with its PostgreSQL
    backend in another database on the same PostgreSQL server (or SQLite with
    --mlflow-backend sqlite); the client, `MlflowClient.log_batch` with B steps x 5 metrics per
    call, runs in MLflow's own virtualenv (bench/.mlflow-venv, made on first use) in a subprocess.
  Rows are steps (one Epochal report, five MLflow metric rows); values are metric values.

The cost of tracing on ingestion: a second master on the same database with OpenTelemetry on
(OTEL_EXPORTER_OTLP_ENDPOINT: an OTLP/HTTP sink in this process that takes and drops what it
is sent; the harness sends one `traceparent` throughout, as a trial run's reports do), the two
alternating in rounds as above; the figure is how much lower the traced master's ingestion rate
is. Reports are sampled per trace (common/tracing.py: the first 10, then one a second); with
OTEL_TRACES_SAMPLER=always_on in this bench's environment every report is traced.
The last line is the one-line summary.

    .venv/bin/python bench/api.py [--experiments 10] [--trials 100] [--points 1000] \
        [--requests 300] [--read-warm-ups N] [--steps 20000] [--rounds 4] [--batch 100] \
        [--warm-up-steps 1000] \
        [--mlflow-backend postgres|sqlite] [--skip-mlflow] [--skip-tracing] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from activities.database import apply_migrations, create_pool  # noqa: E402
from bench.common.postgres import postgres  # noqa: E402
from bench.common.reads import ReadPath, time_reads  # noqa: E402
from bench.common.smoke import add_smoke_option, parse_args  # noqa: E402
from bench.common.temporal import dev_server  # noqa: E402
from common import processes  # noqa: E402
from common.tokens import mint_trial_token  # noqa: E402
from deploy.postgres import EmbeddedPostgres  # noqa: E402
from harness import core  # noqa: E402
from harness.core._info import TrialInfo  # noqa: E402

MLFLOW_VENV = REPO / "bench" / ".mlflow-venv"
MLFLOW_PACKAGES = ("mlflow", "psycopg2-binary")
METRICS = ("loss", "accuracy", "lr", "grad_norm", "throughput")
VALIDATION_EVERY = 100
WARM_UP_STEPS = 1_000
ADMIN_PASSWORD = "bench-admin-password"
SEARCHER = {"name": "adaptive_asha", "metric": "validation_loss", "smaller_is_better": True,
            "max_trials": 100, "max_length": {"batches": 1000}}

# Runs in MLflow's venv: log S steps of the 5 metrics with log_batch, B steps per call.
MLFLOW_CLIENT = """
import json, sys, time
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

url, steps, batch, warm_up = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
names = sys.argv[5].split(",")
client = MlflowClient(tracking_uri=url)
experiment = client.create_experiment(f"bench-{time.time_ns()}")

def log(run_id, count):
    for start in range(0, count, batch):
        now = int(time.time() * 1000)
        rows = [Metric(name, 1.0 / (step + 1) + i, now, step)
                for step in range(start, min(count, start + batch))
                for i, name in enumerate(names)]
        client.log_batch(run_id, metrics=rows)

log(client.create_run(experiment).info.run_id, warm_up)
run_id = client.create_run(experiment).info.run_id
began = time.perf_counter()
log(run_id, steps)
elapsed = time.perf_counter() - began
stored = len(client.get_metric_history(run_id, names[0]))
print(json.dumps({"seconds": elapsed, "stored": stored}))
"""


# -- servers ----------------------------------------------------------------------------------


@contextmanager
def serving(cmd: list[str], *, name: str, url: str, log_file: Path,
            env: dict[str, str] | None = None, timeout: float = 120) -> Iterator[None]:
    """Run `cmd` until the block ends; wait until GET `url` answers 200 first."""
    proc = processes.spawn(cmd, log_file=log_file, env=env, cwd=REPO)

    def answers() -> bool:
        try:
            return httpx.get(url, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        processes.wait_until(answers, part=name, log_file=log_file, timeout=timeout,
                             pid=proc.pid)
        yield
    finally:
        processes.stop_pid(proc.pid, grace=10)


def ensure_mlflow_venv() -> Path:
    """MLflow's own virtualenv (its pins must not shape Epochal's), made on first use."""
    marker = MLFLOW_VENV / "epochal-bench-ready"
    if not marker.exists():
        print(f"creating {MLFLOW_VENV} with {', '.join(MLFLOW_PACKAGES)} (first use)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(MLFLOW_VENV)], check=True)
        subprocess.run([str(MLFLOW_VENV / "bin" / "python"), "-m", "pip", "install", "--quiet",
                        "--no-input", *MLFLOW_PACKAGES], check=True, stdin=subprocess.DEVNULL)
        marker.write_text(" ".join(MLFLOW_PACKAGES))
    return MLFLOW_VENV / "bin"


def mlflow_version(bin_dir: Path) -> str:
    code = "import mlflow; print(mlflow.__version__)"
    return subprocess.run([str(bin_dir / "python"), "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip()


# -- seeding ----------------------------------------------------------------------------------


def experiment_config(index: int) -> dict[str, Any]:
    return {"name": f"bench-{index}", "entrypoint": "python3 train.py", "searcher": SEARCHER,
            "hyperparameters": {"lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1}},
            "resources": {"resource_pool": "default", "slots_per_trial": 1},
            "checkpoint_storage": {"type": "shared_fs", "host_path": "/tmp/bench"}}


def metric_lines(trial_ids: list[int], points: int) -> Iterator[bytes]:
    """COPY text rows (trial_id, trial_run_id, metric_group, steps_completed, metrics)."""
    for trial_id in trial_ids:
        rng = random.Random(trial_id)
        lines = []
        for step in range(1, points + 1):
            loss = 2.0 / step ** 0.5 + rng.random() * 0.05
            values = (f'{{"loss": {loss:.6f}, "accuracy": {1 - loss / 3:.6f}, "lr": 0.01, '
                      f'"grad_norm": {rng.random():.6f}, "throughput": {900 + step % 7}}}')
            lines.append(f"{trial_id}\t1\ttraining\t{step}\t{values}\n")
            if step % VALIDATION_EVERY == 0:
                lines.append(f'{trial_id}\t1\tvalidation\t{step}\t'
                             f'{{"validation_loss": {loss * 1.1:.6f}, "accuracy": 0.9}}\n')
        yield "".join(lines).encode()


async def seed(db_url: str, experiments: int, trials: int, points: int,
               running: int = 2) -> dict[str, list[int]]:
    """Schema, then experiments and trials (a few thousand rows), then metrics with COPY; the
    last `running` experiments are left ACTIVE, the others COMPLETED with their best trial."""
    pool = await create_pool(db_url)
    try:
        await apply_migrations(pool)
        async with pool.acquire() as conn:
            experiment_ids = [
                await conn.fetchval(
                    "INSERT INTO experiments (name, config, original_config, seed, state)"
                    " VALUES ($1, $2, '', $3, 'COMPLETED') RETURNING id",
                    f"bench-{i}", experiment_config(i), i)
                for i in range(experiments)
            ]
            trial_rows = await conn.fetch(
                "INSERT INTO trials (experiment_id, request_id, hparams, seed, state,"
                " steps_completed, progress, run_id, end_time)"
                " SELECT e, r, jsonb_build_object('lr', 0.001 * r), r, 'COMPLETED', $3, 1, 1, now()"
                " FROM unnest($1::int[]) e, generate_series(0, $2 - 1) r RETURNING id",
                experiment_ids, trials, points)
            trial_ids = sorted(r["id"] for r in trial_rows)

            async def source() -> AsyncIterator[bytes]:
                for chunk in metric_lines(trial_ids, points):
                    yield chunk

            await conn.copy_to_table(
                "metrics", source=source(), format="text",
                columns=["trial_id", "trial_run_id", "metric_group", "steps_completed",
                         "metrics"])
            # Each trial's best validation, as the API keeps it when reports arrive; ended
            # experiments know their best trial (finish_experiment's rule, best_trial()); the
            # last RUNNING experiments do not, so their answers find it among their trials.
            await conn.execute("SELECT refresh_best_validation(array_agg(id)) FROM trials"
                               " WHERE id = ANY($1::int[])", trial_ids)
            await conn.execute(
                "UPDATE experiments e SET best_trial_id = best_trial(e.id)"
                " WHERE e.id <> ALL($1::int[])", experiment_ids[-running:] if running else [])
            await conn.execute(
                "UPDATE experiments SET state = 'ACTIVE', end_time = NULL"
                " WHERE id = ANY($1::int[])", experiment_ids[-running:] if running else [])
            await conn.execute("ANALYZE")
            rows = await conn.fetchval("SELECT count(*) FROM metrics")
        print(f"seeded {experiments} experiments, {len(trial_ids)} trials, {rows:,} metric "
              "reports", flush=True)
        return {"experiments": experiment_ids, "trials": trial_ids}
    finally:
        await pool.close()


async def new_trials(db_url: str, experiment_id: int, count: int) -> list[int]:
    """Empty trials for ingestion (request ids past the experiment's)."""
    pool = await create_pool(db_url)
    try:
        rows = await pool.fetch(
            "INSERT INTO trials (experiment_id, request_id, hparams, seed, state, run_id)"
            " SELECT $1, (SELECT max(request_id) FROM trials WHERE experiment_id = $1) + r,"
            " '{}', r, 'RUNNING', 1 FROM generate_series(1, $2) r"
            " RETURNING id", experiment_id, count)
        return [r["id"] for r in rows]
    finally:
        await pool.close()


# -- measuring --------------------------------------------------------------------------------


def harness_ingest(master: str, cluster_token: str, trial_id: int, experiment_id: int,
                   steps: int) -> float:
    """Seconds for harness.core to deliver `steps` training reports of the 5 metrics."""
    info = TrialInfo(
        experiment_id=experiment_id, trial_id=trial_id, trial_run_id=1,
        task_id=f"{experiment_id}.{trial_id}", allocation_id=f"{experiment_id}.{trial_id}.1",
        trial_seed=0, hparams={}, experiment_config=experiment_config(0),
        latest_checkpoint=None, steps_completed=0, max_length=steps, length_unit="batches",
        checkpoint_storage={"type": "shared_fs", "host_path": tempfile.gettempdir()},
        master_url=master, agent_id="bench",
        session_token=mint_trial_token(cluster_token, trial_id, 1))
    began = time.perf_counter()
    with core.init(info=info) as context:
        for step in range(steps):
            context.train.report_training_metrics(
                step, {name: 1.0 / (step + 1) + i for i, name in enumerate(METRICS)})
    return time.perf_counter() - began


def mlflow_ingest(bin_dir: Path, url: str, steps: int, batch: int, warm_up: bool,
                  warm_up_steps: int = WARM_UP_STEPS) -> float:
    """Seconds for MlflowClient.log_batch to store `steps` steps of the 5 metrics."""
    done = subprocess.run(
        [str(bin_dir / "python"), "-c", MLFLOW_CLIENT, url, str(steps), str(batch),
         str(warm_up_steps if warm_up else 0), ",".join(METRICS)],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"the MLflow client failed:\n{done.stderr[-3000:]}")
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    if answer["stored"] != steps:
        raise SystemExit(f"mlflow stored {answer['stored']} of {steps} steps")
    return float(answer["seconds"])


# -- the run ----------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="epochal-bench-api-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        mlflow_bin = None if args.skip_mlflow else ensure_mlflow_venv()
        with postgres(root) as pg, dev_server(root) as (temporal_address, _):
            db_url = pg.ensure_database("epochal_bench")
            began = time.perf_counter()
            seeded = asyncio.run(seed(db_url, args.experiments, args.trials, args.points))
            print(f"seeding took {time.perf_counter() - began:.1f} s", flush=True)
            port = processes.free_port()
            master = f"http://127.0.0.1:{port}"
            cluster_token = secrets.token_urlsafe(24)
            env = {**os.environ, "EPOCHAL_DB_URL": db_url,
                   "EPOCHAL_TEMPORAL_ADDRESS": temporal_address, "EPOCHAL_API_PORT": str(port),
                   "EPOCHAL_CLUSTER_TOKEN": cluster_token,
                   "EPOCHAL_ADMIN_PASSWORD": ADMIN_PASSWORD,
                   "EPOCHAL_STATE_DIR": str(root / "state")}
            with serving([sys.executable, "-m", "deploy.master"], name="master",
                         url=f"{master}/api/v1/master", log_file=root / "master.log", env=env):
                login = httpx.post(f"{master}/api/v1/auth/login",
                                   json={"username": "admin", "password": ADMIN_PASSWORD})
                login.raise_for_status()
                headers = {"Authorization": f"Bearer {login.json()['token']}"}
                reads = measure_reads(master, headers, seeded, args.requests,
                                      args.read_warm_ups)
                epochal = EpochalIngest(master, cluster_token, headers, db_url,
                                        seeded["experiments"][0], args.warm_up_steps)
                cost = "" if args.skip_tracing else "; tracing " + tracing_cost(
                    args, epochal, env, root)
                if mlflow_bin is None:
                    seconds = epochal.measure(args.steps)
                    print(f"{reads_summary(reads)}; ingestion epochal "
                          f"{args.steps / seconds:,.0f} rows/s ({args.steps:,} rows in "
                          f"{seconds:.2f} s); MLflow skipped{cost}")
                    return
                with mlflow_server(args.mlflow_backend, root, pg, mlflow_bin) as mlflow_url:
                    epochal_seconds, mlflow_seconds = ingest_in_rounds(
                        args, epochal, lambda steps, first: mlflow_ingest(
                            mlflow_bin, mlflow_url, steps, args.batch, first,
                            args.warm_up_steps))
    epochal_rate = args.steps / epochal_seconds
    mlflow_rate = args.steps / mlflow_seconds
    values = len(METRICS)
    print(f"ingestion epochal (harness.core -> /metrics/batch, PostgreSQL): {args.steps:,} rows "
          f"in {epochal_seconds:.2f} s = {epochal_rate:,.0f} rows/s "
          f"({epochal_rate * values:,.0f} values/s)")
    print(f"ingestion mlflow {mlflow_version(mlflow_bin)} (log_batch, {args.mlflow_backend}): "
          f"{args.steps:,} rows in {mlflow_seconds:.2f} s = {mlflow_rate:,.0f} rows/s "
          f"({mlflow_rate * values:,.0f} values/s)")
    print(f"{reads_summary(reads)}; ingestion {epochal_rate:,.0f} rows/s vs MLflow "
          f"{mlflow_rate:,.0f} rows/s = {epochal_rate / mlflow_rate:.1f}x{cost}")


def tracing_cost(args: argparse.Namespace, main: EpochalIngest, env: dict[str, str],
                 root: Path) -> str:
    """Ingestion through two fresh masters on the same database, one with tracing on, in
    alternating rounds; prints both rates and returns the summary's phrase (the traced master's
    shortfall). Both fresh, so neither has the main master's warm connections (an A/A run of
    the main master against a fresh one differs by ~10% on a 2-core machine)."""
    sink = ThreadingHTTPServer(("127.0.0.1", 0), _OtlpSink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    plain_port, traced_port = processes.free_port(), processes.free_port()
    untraced = {k: v for k, v in env.items() if not k.startswith("OTEL_")}
    traced_env = {**untraced, "EPOCHAL_API_PORT": str(traced_port),
                  "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink.server_address[1]}"}
    if env.get("OTEL_TRACES_SAMPLER"):
        traced_env["OTEL_TRACES_SAMPLER"] = env["OTEL_TRACES_SAMPLER"]
    masters = {"plain": (plain_port, {**untraced, "EPOCHAL_API_PORT": str(plain_port)}),
               "traced": (traced_port, traced_env)}
    try:
        with contextlib.ExitStack() as stack:
            ingest = {}
            for name, (port, master_env) in masters.items():
                url = f"http://127.0.0.1:{port}"
                stack.enter_context(serving(
                    [sys.executable, "-m", "deploy.master"], name=f"{name} master",
                    url=f"{url}/api/v1/master", log_file=root / f"{name}-master.log",
                    env=master_env))
                ingest[name] = EpochalIngest(url, main.cluster_token, main.headers,
                                             main.db_url, main.experiment_id,
                                             main.warm_up_steps)
            per_round = args.steps // args.rounds
            totals = {"plain": 0.0, "traced": 0.0}
            # One trial run's trace for all the rounds, as one long run reports.
            os.environ["TRACEPARENT"] = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
            try:
                for index in range(args.rounds + 1):
                    # Which goes first alternates, so a drift in the machine's load evens out.
                    for name in ("plain", "traced") if index % 2 else ("traced", "plain"):
                        seconds = ingest[name].measure(per_round, warm_up=index == 0)
                        if index:
                            totals[name] += seconds
            finally:
                del os.environ["TRACEPARENT"]
    finally:
        sink.shutdown()
    plain_rate = per_round * args.rounds / totals["plain"]
    traced_rate = per_round * args.rounds / totals["traced"]
    cost = 1 - traced_rate / plain_rate
    print(f"tracing: fresh plain master {plain_rate:,.0f} rows/s, fresh traced master (OTLP "
          f"exporter) {traced_rate:,.0f} rows/s, {_OtlpSink.requests} OTLP requests: cost "
          f"{cost:+.1%}", flush=True)
    return f"cost {cost * 100:+.1f}% of ingestion rows/s"


class _OtlpSink(BaseHTTPRequestHandler):
    """Takes OTLP/HTTP exports and drops them (the exporter's work is what is measured)."""

    requests = 0

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).requests += 1
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


def reads_summary(reads: dict[str, tuple[float, float]]) -> str:
    """The worst p99 of the reads, then each read's."""
    worst_name, (_, worst) = max(reads.items(), key=lambda item: item[1][1])
    return (f"reads p99 <= {worst:.1f} ms (worst: {worst_name}; "
            + ", ".join(f"{n} {p99:.1f} ms" for n, (_, p99) in reads.items()) + ")")


class EpochalIngest:
    """Ingestion into fresh trials of one experiment, checked against what the API then shows."""

    def __init__(self, master: str, cluster_token: str, headers: dict[str, str], db_url: str,
                 experiment_id: int, warm_up_steps: int = WARM_UP_STEPS) -> None:
        self.master, self.cluster_token, self.headers = master, cluster_token, headers
        self.db_url, self.experiment_id = db_url, experiment_id
        self.warm_up_steps = warm_up_steps

    def measure(self, steps: int, warm_up: bool = True) -> float:
        if warm_up:
            trial_id = asyncio.run(new_trials(self.db_url, self.experiment_id, 1))[0]
            harness_ingest(self.master, self.cluster_token, trial_id, self.experiment_id,
                           self.warm_up_steps)
        trial_id = asyncio.run(new_trials(self.db_url, self.experiment_id, 1))[0]
        seconds = harness_ingest(self.master, self.cluster_token, trial_id, self.experiment_id,
                                 steps)
        stored = httpx.get(f"{self.master}/api/v1/trials/{trial_id}/metrics",
                           headers=self.headers, timeout=60).json()["metrics"]
        if len(stored) != steps:
            raise SystemExit(f"epochal stored {len(stored)} of {steps} reports")
        return seconds


def ingest_in_rounds(args: argparse.Namespace, epochal: EpochalIngest,
                     mlflow: Callable[[int, bool], float]) -> tuple[float, float]:
    """Alternate the two in rounds, so that a change in the machine's load (it is shared)
    falls on both alike, after one untimed round each (MLflow's first run after its server
    starts is markedly slower); returns the total seconds of each over the timed rounds."""
    per_round = args.steps // args.rounds
    epochal_total = mlflow_total = 0.0
    for index in range(args.rounds + 1):
        warm_up = index == 0
        epochal_seconds = epochal.measure(per_round, warm_up=warm_up)
        mlflow_seconds = mlflow(per_round, warm_up)
        label = "warm-up round" if warm_up else f"round {index}"
        print(f"{label}: {per_round:,} rows, epochal {per_round / epochal_seconds:,.0f}"
              f" rows/s, mlflow {per_round / mlflow_seconds:,.0f} rows/s", flush=True)
        if not warm_up:
            epochal_total += epochal_seconds
            mlflow_total += mlflow_seconds
    return epochal_total, mlflow_total


def measure_reads(master: str, headers: dict[str, str], seeded: dict[str, list[int]],
                  requests: int, warm_ups: int | None = None) -> dict[str, tuple[float, float]]:
    rng = random.Random(7)
    experiments, trials = seeded["experiments"], seeded["trials"]
    per_experiment = len(trials) // len(experiments)
    cases: dict[str, ReadPath] = {
        "experiment list": lambda: ("/api/v1/experiments", {"limit": 100}),
        "experiment detail": lambda: (f"/api/v1/experiments/{rng.choice(experiments)}", {}),
        "trials page (100 by id)": lambda: (
            f"/api/v1/experiments/{rng.choice(experiments)}/trials",
            {"limit": 100, "offset": 100 * rng.randrange(max(1, per_experiment // 100))}),
        "trials page (100 by best validation)": lambda: (
            f"/api/v1/experiments/{rng.choice(experiments)}/trials",
            {"limit": 100, "sortBy": "SORT_BY_BEST_VALIDATION_METRIC",
             "offset": 100 * rng.randrange(max(1, per_experiment // 100))}),
        "trial curves (all metrics, 200)": lambda: (
            "/api/v1/trials/time-series",
            {"trialIds": rng.choice(trials), "maxDatapoints": 200}),
        "trial curve (loss, 200)": lambda: (
            "/api/v1/trials/time-series",
            {"trialIds": rng.choice(trials), "maxDatapoints": 200, "metricNames": "loss"}),
        "trial metrics 250..750 (full)": lambda: (
            f"/api/v1/trials/{rng.choice(trials)}/metrics",
            {"group": "training", "startBatches": 250, "endBatches": 750}),
    }
    with httpx.Client(base_url=master, headers=headers, timeout=60) as api:
        return {name: time_reads(api, name, path, requests, warm_ups)
                for name, path in cases.items()}


@contextmanager
def mlflow_server(backend: str, root: Path, pg: EmbeddedPostgres, bin_dir: Path) -> Iterator[str]:
    """`mlflow server` on its PostgreSQL database (or SQLite file); yields its URL."""
    if backend == "postgres":
        store = pg.ensure_database("mlflow_bench").replace("postgresql://",
                                                           "postgresql+psycopg2://", 1)
    else:
        store = f"sqlite:///{root / 'mlflow.db'}"
    port = processes.free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [str(bin_dir / "mlflow"), "server", "--backend-store-uri", store,
           "--default-artifact-root", str(root / "mlflow-artifacts"), "--host", "127.0.0.1",
           "--port", str(port), "--workers", "1"]
    with serving(cmd, name="mlflow server", url=f"{url}/health",
                 log_file=root / "mlflow.log", timeout=300):
        yield url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=10)
    parser.add_argument("--trials", type=int, default=100, help="trials per experiment")
    parser.add_argument("--points", type=int, default=1000, help="training reports per trial")
    parser.add_argument("--requests", type=int, default=300, help="requests per read")
    parser.add_argument("--steps", type=int, default=20_000, help="steps to ingest")
    parser.add_argument("--rounds", type=int, default=4,
                        help="ingestion alternates between the two in this many rounds")
    parser.add_argument("--batch", type=int, default=200,
                        help="steps per MLflow log_batch (the harness sends up to 200 per batch)")
    parser.add_argument("--mlflow-backend", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--skip-mlflow", action="store_true",
                        help="measure Epochal only (no comparison; for quick iterations)")
    parser.add_argument("--skip-tracing", action="store_true",
                        help="do not measure the cost of tracing (a second, traced master)")
    parser.add_argument("--warm-up-steps", type=int, default=WARM_UP_STEPS,
                        help="steps ingested untimed before each side's first round")
    parser.add_argument("--read-warm-ups", type=int, default=None,
                        help="untimed requests per read first (default: a tenth of --requests, "
                             "10 at least)")
    # 3 experiments: one COMPLETED beside the two ACTIVE; 250 points: a validation report (every
    # 100) and metrics in the full-resolution read's 250..750.
    add_smoke_option(parser, experiments=3, trials=1, points=250, requests=1, read_warm_ups=0,
                     steps=10, rounds=1, warm_up_steps=1, skip_mlflow=True)
    run(parse_args(parser))


if __name__ == "__main__":
    main()
