"""Importing a Determined cluster's history (issue 39): `epochal import determined` copies one
cluster's whole history, read through Determined's REST API, into an Epochal cluster. The source
here is another Epochal cluster (it serves Determined's API), whose history this bench writes
straight into its PostgreSQL, in bulk, as the master itself would have stored it.

Starts one PostgreSQL (two databases) and one Temporal dev server (two namespaces) in a temporary
directory, and two masters on them (`python -m deploy.master`, as `epochal master run`): the
SOURCE and the TARGET, each with its own cluster id, port, state directory and admin. No agents.

History (the defaults; `--smoke` is a hundredth of it, imported with --logs and --rerun):
  - users (`--users`, one of them an admin), workspaces (`--workspaces`, 2 projects each, beside
    Uncategorized), one template per workspace;
  - experiments (`--experiments` 1,000 terminal ones, and 1% more still PAUSED, the newest: not
    terminal, the importer skips them and says so) spread over the projects and users: the
    config of examples/determined_core/adaptive.yaml normalised and stored as
    services/submission.py stores it (its checkpoint storage a shared_fs directory of the
    bench; one experiment's a directory that does not exist, which the target warns about),
    with that example's files as its model definition (packed as `epochal experiment create`
    and the API pack them); every 25th CANCELED (its first trial completed, the others
    canceled halfway), every 40th ERROR (its first trial failed halfway, the others canceled),
    the rest COMPLETED; every 10th archived, every 50th a fork of the one before, labels, notes;
  - trials (`--trials` 2 per experiment) with hyperparameters drawn as the searcher draws
    them, restarts, times;
  - per trial `--training` 475 training reports (every 100 batches: loss, accuracy,
    learning_rate, batches_per_second) and `--validations` 50 validation reports
    (validation_loss, validation_accuracy) spread over its length, stored as the harness's
    reports are, with each trial's best validation and each experiment's best trial kept as
    the master keeps them: about 1,036,000 metric rows, 1,026,000 of them importable;
  - per trial `--checkpoints` 5 checkpoints at its last validations, the last 2 COMPLETED with
    their files' sizes, the others DELETED (as the checkpoint GC leaves them);
  - models (`--models` 3) with 2 versions each, on COMPLETED checkpoints;
  - per trial `--log-lines` 20 log lines (imported only with `--logs`).
Written in a few bulk statements (INSERT ... SELECT from unnest and generate_series): about
16 s for the default size on 2 cores.

Then it checks the source answers as Determined would (experiments, one experiment, its model
definition, trials, checkpoints, a trial's metrics and logs, models, users, workspaces,
projects, templates) and runs the real importer, `epochal -m TARGET import determined --master
SOURCE --json` (`python -m deploy.console`, the installed `epochal`), as a subprocess logged in
to both as admin (the target by EPOCHAL_TOKEN, the source by DET_USER and DET_PASS, as `det`):
first `--dry-run` (its time and counts, checked against the history), then the import.
Measured: the import's wall time, metric rows/s and experiments/s, the importer's peak memory
(max RSS, from wait4), each part's CPU (the importer, both masters, PostgreSQL with its
backends, Temporal), the target master's RSS before and after and its peak (VmHWM). Then what
the target holds is counted against what the source holds (terminal experiments only), and
sampled experiments (one of each kind the generator makes) are compared on both clusters:
fields, config, model definition, trials, every metric report, checkpoints; a difference fails
the bench, after its figures. `--rerun` times a second run over the same history, which must
add nothing. `--source-only` stops after the source's checks (to measure the generator, or to
develop against it).
The last line is the one-line summary.

    .venv/bin/python bench/import_history.py [--experiments 1000] [--trials 2] \
        [--training 475] [--validations 50] [--checkpoints 5] [--models 3] [--users 6] \
        [--workspaces 3] [--log-lines 20] [--logs] [--parallel N] [--rerun] [--source-only] \
        [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import os
import random
import secrets
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from activities.database import apply_migrations, create_pool  # noqa: E402
from api.model_definition import build_tarball  # noqa: E402
from bench.common.postgres import postgres  # noqa: E402
from bench.common.smoke import add_smoke_option, parse_args  # noqa: E402
from cli.model_dir import package  # noqa: E402
from common import processes  # noqa: E402
from common.expconf import planned_trials  # noqa: E402
from common.processes import read_pid  # noqa: E402
from common.states import TERMINAL_STATES  # noqa: E402
from deploy.postgres import EmbeddedPostgres  # noqa: E402
from deploy.temporal_server import TemporalDevServer  # noqa: E402
from services.submission import normalized_config  # noqa: E402

EXAMPLE = REPO / "examples" / "determined_core"
CONFIG_FILE = EXAMPLE / "adaptive.yaml"
ADMIN_PASSWORD = "bench-admin-password"
TARGET_NAMESPACE = "epochal-import-target"
BATCHES_PER_REPORT = 100  # a training report every 100 batches
HISTORY_DAYS = 180  # experiments started over the last half year
GiB = 2**30

# The harness's reports, as stored (api/routes/trials.py store_reports: avgMetrics as given).
TRAINING_METRICS = "loss, accuracy, learning_rate, batches_per_second"
VALIDATION_METRICS = "validation_loss, validation_accuracy"


@dataclass
class History:
    """What the generator wrote into the source, by kind (and what the target should get)."""

    users: int = 0
    workspaces: int = 0
    projects: int = 0
    templates: int = 0
    experiments: int = 0
    trials: int = 0
    metrics: int = 0
    checkpoints: int = 0
    models: int = 0
    model_versions: int = 0
    logs: int = 0
    non_terminal: int = 0  # experiments the importer must skip
    unreachable_storage: list[int] = field(default_factory=list)  # experiment ids
    sample_experiment: int = 0
    sample_trial: int = 0
    # compared on both clusters after the import: one of each kind the generator makes
    compared: list[int] = field(default_factory=list)


# -- servers ----------------------------------------------------------------------------------


@contextmanager
def temporal(root: Path) -> Iterator[Future[str]]:
    """One headless dev server, started in the background (its address when it answers); the
    source's master works in `default`, the target's in a namespace of its own (both run a
    scheduler workflow named after the pool)."""
    server = TemporalDevServer(root / "temporal.db", log_file=root / "temporal.log",
                               pid_file=root / "temporal.pid")
    with ThreadPoolExecutor(1) as starter:
        address = starter.submit(server.start, processes.free_port(), headless=True,
                                 extra_namespaces=(TARGET_NAMESPACE,))
        try:
            yield address
        finally:
            with contextlib.suppress(Exception):
                address.result()
            server.stop()


@dataclass
class Master:
    name: str
    url: str
    pid: int
    log_file: Path
    db_url: str
    headers: dict[str, str] = field(default_factory=dict)


def master_env(name: str, root: Path, db_url: str, temporal_address: str, namespace: str,
               port: int) -> dict[str, str]:
    state = root / name
    state.mkdir()
    return {**os.environ, "PYTHONPATH": str(REPO), "EPOCHAL_DB_URL": db_url,
            "EPOCHAL_TEMPORAL_ADDRESS": temporal_address,
            "EPOCHAL_TEMPORAL_NAMESPACE": namespace, "EPOCHAL_API_PORT": str(port),
            "EPOCHAL_CLUSTER_ID": f"bench-{name}-{secrets.token_hex(4)}",
            "EPOCHAL_CLUSTER_TOKEN": secrets.token_urlsafe(24),
            "EPOCHAL_ADMIN_PASSWORD": ADMIN_PASSWORD, "EPOCHAL_STATE_DIR": str(state)}


@contextmanager
def masters(root: Path, pg: EmbeddedPostgres, temporal_address: str
            ) -> Iterator[tuple[Master, Master]]:
    """Both masters, started side by side, each answering and logged in to as admin."""
    started: list[Master] = []
    try:
        for name, namespace in (("source", "default"), ("target", TARGET_NAMESPACE)):
            db_url = pg.ensure_database(f"epochal_{name}")
            port = processes.free_port()
            log_file = root / f"{name}-master.log"
            proc = processes.spawn([sys.executable, "-m", "deploy.master"], log_file=log_file,
                                   env=master_env(name, root, db_url, temporal_address,
                                                  namespace, port), cwd=REPO)
            started.append(Master(name, f"http://127.0.0.1:{port}", proc.pid, log_file, db_url))
        for master in started:
            processes.wait_until(partial(_answers, master.url), part=f"{master.name} master",
                                 log_file=master.log_file, timeout=180, pid=master.pid)
            login = httpx.post(f"{master.url}/api/v1/auth/login", timeout=60,
                               json={"username": "admin", "password": ADMIN_PASSWORD})
            login.raise_for_status()
            master.headers = {"Authorization": f"Bearer {login.json()['token']}"}
        yield started[0], started[1]
    finally:
        for master in started:
            processes.stop_pid(master.pid, grace=10)


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/api/v1/master", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def rss(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process in bytes: its memory now and its peak."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) * 1024
    return fields.get("VmRSS", 0), fields.get("VmHWM", 0)


# -- the history ------------------------------------------------------------------------------


def experiment_configs(count: int, trials: int, reports: int, period: int, storage: str,
                       missing: str, missing_index: int
                       ) -> list[tuple[dict[str, Any], str, int]]:
    """Each experiment's (normalised config, original YAML, planned trials): the example's
    config with its own name and this history's lengths, stored as a submission stores it."""
    base = yaml.safe_load(CONFIG_FILE.read_text())
    out = []
    for index in range(count):
        data = copy.deepcopy(base)
        data["name"] = f"{base['name']}-{index}"
        data["searcher"]["max_trials"] = trials
        data["searcher"]["max_length"] = {"batches": reports * BATCHES_PER_REPORT}
        data["hyperparameters"]["validation_period"] = period
        data["labels"] = ["bench", f"group-{index % 5}"]
        data["checkpoint_storage"] = {
            "type": "shared_fs", "host_path": missing if index == missing_index else storage}
        data["reproducibility"] = {"experiment_seed": index}
        text = yaml.safe_dump(data, sort_keys=False)
        checked = normalized_config(text, {"type": "shared_fs", "host_path": storage})
        out.append((checked.data, text, planned_trials(checked.model)))
    return out


def model_definition() -> bytes:
    """The example's files packed as `epochal experiment create` sends them and the API keeps
    them (a .tar.gz)."""
    tgz, _ = build_tarball(package(EXAMPLE), 96 * 2**20)
    return tgz


def validation_steps(args: argparse.Namespace, training_reports: int) -> list[int]:
    """The steps (batches) of a trial's validations: `--validations` spread evenly over the
    full length, each at a training report's step, those within the trial's
    `training_reports`."""
    count = min(int(args.validations), int(args.training))
    reports = [v * int(args.training) // count for v in range(1, count + 1)]
    return [n * BATCHES_PER_REPORT for n in reports if n <= training_reports]


def experiment_state(index: int, terminal: int) -> str:
    if index >= terminal:
        return "PAUSED"  # the newest, not terminal: the importer skips them
    if index % 25 == 5:
        return "CANCELED"
    if index % 40 == 7:
        return "ERROR"
    return "COMPLETED"


def trial_state(experiment: str, request: int) -> str:
    """A canceled experiment's first trial had completed; an errored one's first trial failed
    and the others were canceled with it."""
    if experiment in ("CANCELED", "ERROR") and request > 0:
        return "CANCELED"
    if experiment == "CANCELED":
        return "COMPLETED"
    return experiment


async def generate(db_url: str, args: argparse.Namespace, storage: Path) -> History:
    """The whole history, in a few bulk statements (unnest and generate_series), on a fresh
    schema."""
    rng = random.Random(39)
    history = History()
    pool = await create_pool(db_url)
    try:
        await apply_migrations(pool)
        async with pool.acquire() as conn, conn.transaction():
            # Users, workspaces (2 projects each), one template per workspace.
            names = [f"user{i}" for i in range(args.users)]
            await conn.execute(
                "INSERT INTO users (username, display_name, admin, active, created_at,"
                " modified_at) SELECT u, initcap(u), u = $2, true, now() - interval '200 days',"
                " now() - interval '200 days' FROM unnest($1::text[]) u", names, names[0])
            owners = ["admin", *names]
            workspace_ids = [r["id"] for r in await conn.fetch(
                "INSERT INTO workspaces (name, owner, created_at)"
                " SELECT 'team-' || w, ($2::text[])[1 + w % array_length($2::text[], 1)],"
                "        now() - interval '190 days'"
                " FROM generate_series(1, $1) w RETURNING id", args.workspaces, owners)]
            project_ids = [1] + [r["id"] for r in await conn.fetch(
                "INSERT INTO projects (workspace_id, name, key, description, owner, created_at)"
                " SELECT w, 'project-' || p, 'P' || w || 'X' || p, 'bench project ' || p,"
                "        'admin', now() - interval '185 days'"
                " FROM unnest($1::int[]) w, generate_series(1, 2) p ORDER BY w, p RETURNING id",
                workspace_ids)]
            template = {"resources": {"slots_per_trial": 1}, "max_restarts": 2,
                        "checkpoint_storage": {"type": "shared_fs", "host_path": str(storage),
                                               "save_trial_best": 1, "save_trial_latest": 1}}
            await conn.execute(
                "INSERT INTO templates (name, workspace_id, config, owner)"
                " SELECT 'template-' || w, w, $2::jsonb, 'admin' FROM unnest($1::int[]) w",
                workspace_ids, template)
            history.users = 1 + args.users
            history.workspaces = 1 + len(workspace_ids)
            history.projects = len(project_ids)
            history.templates = len(workspace_ids)

            # Experiments and their model definitions.
            count = args.experiments + max(1, args.experiments // 100)  # and 1% PAUSED
            missing_index = 3 % count
            period = args.training * BATCHES_PER_REPORT // max(1, args.validations)
            configs = experiment_configs(count, args.trials, args.training, period, str(storage),
                                         str(storage.parent / "unmounted-storage"),
                                         missing_index)
            now = datetime.now(UTC)
            span = timedelta(hours=2 + args.training / 100)
            starts = [now - timedelta(days=HISTORY_DAYS) * (1 - i / count) - span * 2
                      for i in range(count)]
            states = [experiment_state(i, args.experiments) for i in range(count)]
            ids = sorted(r["id"] for r in await conn.fetch(
                "INSERT INTO experiments (name, description, labels, config, original_config,"
                " seed, owner, project_id, planned_trials, state, archived, notes, start_time,"
                " end_time)"
                " SELECT n, d, string_to_array(l, ','), c, o, s, w, p, t, st, a, nt, b, f"
                " FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::text[],"
                "   $6::bigint[], $7::text[], $8::int[], $9::int[], $10::text[], $11::bool[],"
                "   $12::text[], $13::timestamptz[], $14::timestamptz[])"
                "   WITH ORDINALITY AS e (n, d, l, c, o, s, w, p, t, st, a, nt, b, f, i)"
                " ORDER BY i RETURNING id",
                [c["name"] for c, _, _ in configs],
                [c.get("description") for c, _, _ in configs],
                # unnest flattens a text[][]: each experiment's labels go as one string
                [",".join(c.get("labels") or []) for c, _, _ in configs],
                [c for c, _, _ in configs], [t for _, t, _ in configs],
                list(range(count)), [owners[i % len(owners)] for i in range(count)],
                [project_ids[i % len(project_ids)] for i in range(count)],
                [p for _, _, p in configs], states,
                [i % 10 == 9 and states[i] != "PAUSED" for i in range(count)],
                [f"Run {i}: baseline sweep." if i % 25 == 0 else "" for i in range(count)],
                starts,
                [None if s == "PAUSED" else t + span
                 for s, t in zip(states, starts, strict=True)]))
            # Serial ids follow the rows' order (one INSERT ... SELECT ... ORDER BY).
            await conn.execute(
                "UPDATE experiments SET parent_id = id - 1 WHERE id = ANY($1::int[])"
                " AND (id - $2) % 50 = 49", ids, ids[0])
            tgz = model_definition()
            await conn.execute(
                "INSERT INTO model_definitions (experiment_id, tgz, size_bytes)"
                " SELECT e, $2, $3 FROM unnest($1::int[]) e", ids, tgz, len(tgz))
            history.unreachable_storage = [ids[missing_index]]

            # Trials: hyperparameters drawn as the searcher draws them (log-uniform lr).
            rows: list[tuple[Any, ...]] = []
            for index, experiment_id in enumerate(ids):
                for request in range(args.trials):
                    state = trial_state(states[index], request)
                    restarts = 1 if (index + request) % 7 == 0 else 0
                    done = state != "PAUSED"
                    reports = args.training if state in ("COMPLETED", "PAUSED") else (
                        args.training // 2)
                    hparams = {"learning_rate": 10 ** rng.uniform(-4, -1), "batch_size": 32,
                               "validation_period": period,
                               "seconds_per_batch": 0.0}
                    start = starts[index] + timedelta(minutes=request)
                    rows.append((experiment_id, request, hparams, rng.randrange(2**31), state,
                                 restarts, 1 + restarts, reports * BATCHES_PER_REPORT,
                                 1.0 if state == "COMPLETED" else reports / args.training,
                                 start, start + span if done else None, "agent-0"))
            trial_rows = await conn.fetch(
                "INSERT INTO trials (experiment_id, request_id, hparams, seed, state, restarts,"
                " run_id, steps_completed, progress, start_time, end_time, agent_id)"
                " SELECT * FROM unnest($1::int[], $2::int[], $3::jsonb[], $4::bigint[],"
                "   $5::text[], $6::int[], $7::int[], $8::bigint[], $9::float8[],"
                "   $10::timestamptz[], $11::timestamptz[], $12::text[])"
                " RETURNING id, experiment_id, run_id, steps_completed, start_time, end_time",
                *[list(column) for column in zip(*rows, strict=True)])
            trial_ids = [r["id"] for r in trial_rows]
            history.sample_trial = trial_ids[0]
            history.sample_experiment = ids[0]
            # completed, unmounted storage, canceled, errored, archived, a fork, the last
            history.compared = sorted({ids[i] for i in (0, 3, 5, 7, 9, 49, args.experiments - 1)
                                       if i < args.experiments})

            # Metrics: training every 100 batches, validations spread evenly, as reported;
            # n is the report's index, its time a share of the trial's run.
            await conn.execute(
                "INSERT INTO metrics (trial_id, trial_run_id, metric_group, steps_completed,"
                " metrics, report_time)"
                " SELECT t.id, t.run_id, 'training', n * $2::int, jsonb_build_object("
                "   'loss', 2.0 / sqrt(n) * (1 + 0.1 * abs(sin(t.id * 12.9898 + n * 78.233))),"
                "   'accuracy', 1 - 0.9 / sqrt(n),"
                "   'learning_rate', (t.hparams ->> 'learning_rate')::float8,"
                "   'batches_per_second', 900 + 50 * sin(n)),"
                "   t.start_time + (coalesce(t.end_time, now()) - t.start_time)"
                "     * (n / ($1::int + 1.0))"
                " FROM trials t, generate_series(1, $1::int) n"
                " WHERE t.id = ANY($3::int[]) AND n * $2::int <= t.steps_completed",
                args.training, BATCHES_PER_REPORT, trial_ids)
            await conn.execute(
                "INSERT INTO metrics (trial_id, trial_run_id, metric_group, steps_completed,"
                " metrics, report_time)"
                " SELECT t.id, t.run_id, 'validation', n * $2::int, jsonb_build_object("
                "   'validation_loss',"
                "     2.2 / sqrt(n) * (1 + 0.1 * abs(sin(t.id * 4.1414 + n * 3.7))),"
                "   'validation_accuracy', 1 - 1.0 / sqrt(n)),"
                "   t.start_time + (coalesce(t.end_time, now()) - t.start_time)"
                "     * (n / ($1::int + 1.0))"
                " FROM trials t, generate_series(1, $4::int) v,"
                "   LATERAL (SELECT v * $1::int / $4::int AS n) r"
                " WHERE t.id = ANY($3::int[]) AND n * $2::int <= t.steps_completed",
                args.training, BATCHES_PER_REPORT, trial_ids,
                min(args.validations, args.training))
            await conn.execute("SELECT refresh_best_validation($1::int[])", trial_ids)
            await conn.execute(
                "UPDATE experiments e SET best_trial_id = best_trial(e.id)"
                " WHERE id = ANY($1::int[]) AND state <> 'PAUSED'", ids)

            # Checkpoints at each trial's last validations: the newest 2 kept, the rest
            # DELETED by GC (no files left).
            checkpoints: list[tuple[Any, ...]] = []
            for trial in trial_rows:
                steps = validation_steps(
                    args, trial["steps_completed"] // BATCHES_PER_REPORT)[-args.checkpoints:]
                for position, step in enumerate(steps):
                    kept_here = position >= len(steps) - 2
                    checkpoint_uuid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
                    task_id = f"{trial['experiment_id']}.{trial['id']}"
                    checkpoints.append((
                        checkpoint_uuid, trial["id"], task_id, f"{task_id}.{trial['run_id']}",
                        step, {"steps_completed": step, "framework": "numpy"},
                        {"checkpoint.npz": 8_192 + step % 997, "metadata.json": 44}
                        if kept_here else {},
                        f"{storage}/{checkpoint_uuid}", "COMPLETED" if kept_here else "DELETED",
                        trial["start_time"] + ((trial["end_time"] or now) - trial["start_time"])
                        * (step / BATCHES_PER_REPORT / (args.training + 1))))
            await conn.execute(
                "INSERT INTO checkpoints (uuid, trial_id, task_id, allocation_id,"
                " steps_completed, metadata, resources, storage_path, state, report_time)"
                " SELECT * FROM unnest($1::uuid[], $2::int[], $3::text[], $4::text[],"
                "   $5::bigint[], $6::jsonb[], $7::jsonb[], $8::text[], $9::text[],"
                "   $10::timestamptz[])",
                *[list(column) for column in zip(*checkpoints, strict=True)])

            # Models, each with 2 versions on kept checkpoints of the first experiments.
            kept = [c for c in checkpoints if c[8] == "COMPLETED"]
            for m in range(args.models):
                model_id = await conn.fetchval(
                    "INSERT INTO models (name, description, notes, metadata, labels, owner,"
                    " workspace_id, created_at, updated_at) VALUES ($1, $2, '', $3, $4, $5, $6,"
                    " now() - interval '30 days', now() - interval '3 days') RETURNING id",
                    f"model-{m}", f"bench model {m}", {"team": f"team-{m}"}, ["bench"],
                    owners[m % len(owners)], workspace_ids[m % len(workspace_ids)])
                for version in (1, 2):
                    checkpoint = kept[(2 * m + version - 1) % len(kept)]
                    await conn.execute(
                        "INSERT INTO model_versions (model_id, version, checkpoint_uuid, name,"
                        " comment, metadata, labels, owner) VALUES ($1, $2, $3, $4, $5, $6,"
                        " $7, $8)", model_id, version, checkpoint[0], f"v{version}",
                        "promoted from the sweep", {"steps": checkpoint[4]}, ["bench"],
                        owners[m % len(owners)])

            # Log lines.
            await conn.execute(
                "INSERT INTO task_logs (trial_id, task_id, allocation_id, agent_id, stdtype,"
                " level, log, timestamp)"
                " SELECT t.id, t.experiment_id || '.' || t.id,"
                "   t.experiment_id || '.' || t.id || '.' || t.run_id, 'agent-0', 'stdout',"
                "   'INFO', 'step ' || n * 100 || ': training batch loss ' || round("
                "     (2.0 / sqrt(n))::numeric, 6) || E'\\n',"
                "   t.start_time + (coalesce(t.end_time, now()) - t.start_time)"
                "     * (n / ($1::int + 1.0))"
                " FROM trials t, generate_series(1, $1::int) n WHERE t.id = ANY($2::int[])",
                args.log_lines, trial_ids)

            terminal = [i for i, s in zip(ids, states, strict=True) if s in TERMINAL_STATES]
            history.experiments = len(terminal)
            history.non_terminal = count - len(terminal)
            counts = await conn.fetchrow(
                "SELECT (SELECT count(*) FROM trials WHERE experiment_id = ANY($1)) AS trials,"
                " (SELECT count(*) FROM metrics m JOIN trials t ON t.id = m.trial_id"
                "  WHERE t.experiment_id = ANY($1)) AS metrics,"
                " (SELECT count(*) FROM checkpoints c JOIN trials t ON t.id = c.trial_id"
                "  WHERE t.experiment_id = ANY($1)) AS checkpoints,"
                " (SELECT count(*) FROM task_logs l JOIN trials t ON t.id = l.trial_id"
                "  WHERE t.experiment_id = ANY($1)) AS logs", terminal)
            history.trials, history.metrics = counts["trials"], counts["metrics"]
            history.checkpoints, history.logs = counts["checkpoints"], counts["logs"]
            history.models = args.models
            history.model_versions = 2 * args.models
        await pool.execute("ANALYZE")
        return history
    finally:
        await pool.close()


async def source_totals(db_url: str) -> dict[str, int]:
    """Every row of the source by kind (the non-terminal experiments' too)."""
    pool = await create_pool(db_url)
    try:
        return await table_counts(pool)
    finally:
        await pool.close()


async def table_counts(pool: Any) -> dict[str, int]:
    row = await pool.fetchrow(
        "SELECT (SELECT count(*) FROM users) AS users,"
        " (SELECT count(*) FROM workspaces) AS workspaces,"
        " (SELECT count(*) FROM projects) AS projects,"
        " (SELECT count(*) FROM templates) AS templates,"
        " (SELECT count(*) FROM experiments) AS experiments,"
        " (SELECT count(*) FROM trials) AS trials,"
        " (SELECT count(*) FROM metrics) AS metrics,"
        " (SELECT count(*) FROM checkpoints) AS checkpoints,"
        " (SELECT count(*) FROM models) AS models,"
        " (SELECT count(*) FROM model_versions) AS model_versions,"
        " (SELECT count(*) FROM task_logs) AS logs")
    return dict(row)


async def target_counts(db_url: str) -> dict[str, int]:
    pool = await create_pool(db_url)
    try:
        return await table_counts(pool)
    finally:
        await pool.close()


# -- the source, read as the importer reads it ------------------------------------------------


def check_source(source: Master, history: History, args: argparse.Namespace) -> None:
    """The source answers Determined's reads with the generated history."""
    with httpx.Client(base_url=f"{source.url}/api/v1", headers=source.headers,
                      timeout=120) as api:
        def get(path: str, **params: Any) -> Any:
            answer = api.get(path, params=params)
            answer.raise_for_status()
            return answer.json()

        listed = get("/experiments", limit=10, orderBy="ORDER_BY_ASC", sortBy="SORT_BY_ID")
        total = listed["pagination"]["total"]
        expect(total == history.experiments + history.non_terminal,
               f"GET /experiments total {total}")
        experiment_id = history.sample_experiment
        detail = get(f"/experiments/{experiment_id}")
        expect(detail["experiment"]["state"] == "STATE_COMPLETED"
               and detail["config"]["searcher"]["metric"] == "validation_loss",
               f"GET /experiments/{experiment_id}: {detail['experiment']['state']}")
        expect(bool(get(f"/experiments/{experiment_id}/model_def")["b64Tgz"]),
               "GET /experiments/{id}/model_def is empty")
        trials = get(f"/experiments/{experiment_id}/trials", limit=0)["trials"]
        expect(len(trials) == args.trials, f"{len(trials)} trials")
        expect(trials[0]["searcherMetricValue"] is not None, "no best validation kept")
        checkpoints = get(f"/experiments/{experiment_id}/checkpoints")["checkpoints"]
        expect(len(checkpoints) == min(args.checkpoints, args.validations) * args.trials,
               f"{len(checkpoints)} checkpoints")
        reports = get(f"/trials/{history.sample_trial}/metrics")["metrics"]
        groups = {g: sum(1 for r in reports if r["group"] == g)
                  for g in ("training", "validation")}
        expect(groups == {"training": args.training,
                          "validation": len(validation_steps(args, args.training))},
               f"trial {history.sample_trial}'s reports by group: {groups}")
        models = get("/models")["models"]
        expect(len(models) == args.models, f"{len(models)} models")
        if models:
            versions = get(f"/models/{models[0]['name']}/versions")["modelVersions"]
            expect(len(versions) == 2, f"{len(versions)} versions of {models[0]['name']}")
        users = get("/users")["pagination"]["total"]
        expect(users == history.users, f"{users} users")
        workspaces = get("/workspaces")["workspaces"]
        expect(len(workspaces) == history.workspaces, f"{len(workspaces)} workspaces")
        projects = sum(len(get(f"/workspaces/{w['id']}/projects")["projects"])
                       for w in workspaces)
        expect(projects == history.projects, f"{projects} projects")
        templates = get("/templates")["pagination"]["total"]
        expect(templates == history.templates, f"{templates} templates")
        logs = api.get(f"/trials/{history.sample_trial}/logs", params={"follow": "false"})
        logs.raise_for_status()
        lines = len(logs.text.splitlines())
        expect(lines == args.log_lines, f"{lines} log lines")
        print(f"source reads: {total} experiments listed; experiment {experiment_id}: config,"
              f" model definition, {len(trials)} trials, {len(checkpoints)} checkpoints;"
              f" trial {history.sample_trial}: {len(reports)} reports {groups}; "
              f"{lines} log lines; {len(models)} models; {users} users, {len(workspaces)}"
              f" workspaces, {projects} projects, {templates} templates", flush=True)


def expect(ok: bool, what: str) -> None:
    if not ok:
        raise SystemExit(f"the source does not read as generated: {what}")


# -- the import -------------------------------------------------------------------------------


@dataclass
class ImportRun:
    seconds: float
    peak_rss: int  # bytes
    cpu: float  # the importer's user+system seconds
    summary: dict[str, Any]  # the importer's --json summary
    progress: str  # what it wrote on stderr (its progress lines)


def run_import(source: Master, target: Master, root: Path, args: argparse.Namespace,
               label: str, *extra: str) -> ImportRun:
    """`epochal -m TARGET import determined --master SOURCE --json` in a subprocess, as admin
    of both; its wall time and peak RSS (wait4's ru_maxrss: the process's own high-water mark,
    and its children's had it any)."""
    cmd = [sys.executable, "-m", "deploy.console", "-m", target.url, "import", "determined",
           "--master", source.url, "--json", *extra]
    if args.logs:
        cmd.append("--logs")
    if args.parallel:
        cmd += ["--parallel", str(args.parallel)]
    env = {**os.environ, "PYTHONPATH": str(REPO),
           # the target, as every epochal command is told who it is
           "EPOCHAL_TOKEN": target.headers["Authorization"].removeprefix("Bearer "),
           "EPOCHAL_AUTH_FILE": str(root / f"auth-{label}.json"),
           # the source, as `det` is told
           "DET_USER": "admin", "DET_PASS": ADMIN_PASSWORD}
    out_file, err_file = root / f"import-{label}.json", root / f"import-{label}.log"
    with open(out_file, "wb") as out, open(err_file, "wb") as err:
        began = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - began
    proc.returncode = os.waitstatus_to_exitcode(status)
    output, progress = out_file.read_text(errors="replace"), err_file.read_text(errors="replace")
    if proc.returncode != 0:
        raise SystemExit(f"`epochal {' '.join(cmd[3:])}` ({label}) failed with "
                         f"{proc.returncode} after {seconds:.1f} s:\n{output[-3000:]}\n"
                         f"{progress[-3000:]}\nthe target master's log ends:\n"
                         f"{target.log_file.read_text(errors='replace')[-5000:]}")
    return ImportRun(seconds, usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime,
                     json.loads(output), progress)


def show_summary(run: ImportRun, lines: int = 6) -> None:
    """The importer's summary: per kind what it created, found there, skipped and the target
    refused; then the first of its skipped objects and warnings."""
    for kind, n in run.summary["kinds"].items():
        if any(n.values()):
            print(f"    {kind:<15} created {n['created']:>9,}  already there "
                  f"{n['alreadyThere']:>9,}  skipped {n['skipped']:>4}  refused "
                  f"{n['failed']:>4}")
    for title in ("skipped", "warnings"):
        items = run.summary[title]
        if items:
            print(f"    {title} ({len(items)}): " + "; ".join(items[:lines])
                  + ("; ..." if len(items) > lines else ""))


def mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


# -- what the target shows, next to the source ------------------------------------------------

EXPERIMENT_FIELDS = ("name", "description", "labels", "state", "archived", "notes", "username",
                     "startTime", "endTime", "numTrials", "searcherMetric", "projectName",
                     "workspaceName", "bestTrialSearcherMetric")
TRIAL_FIELDS = ("state", "hparams", "restarts", "totalBatchesProcessed", "searcherMetricValue",
                "startTime", "endTime")
CHECKPOINT_FIELDS = ("uuid", "state", "resources", "metadata", "reportTime")


async def local_ids(db_url: str, kind: str) -> dict[int, int]:
    """The target's ids of the source's objects of `kind` (experiment, trial)."""
    pool = await create_pool(db_url)
    try:
        rows = await pool.fetch("SELECT external_id, local_id FROM import_objects"
                                " WHERE kind = $1", kind)
        return {int(r["external_id"]): int(r["local_id"]) for r in rows}
    finally:
        await pool.close()


def compare(source: Master, target: Master, sample: list[int]) -> list[str]:
    """The sampled experiments as both clusters answer them: fields, config, model definition,
    trials, every metric report, checkpoints; what differs."""
    experiments = asyncio.run(local_ids(target.db_url, "experiment"))
    trials = asyncio.run(local_ids(target.db_url, "trial"))
    differences: list[str] = []
    reports = 0
    with httpx.Client(base_url=f"{source.url}/api/v1", headers=source.headers,
                      timeout=120) as src, httpx.Client(
            base_url=f"{target.url}/api/v1", headers=target.headers, timeout=120) as dst:
        def both(source_path: str, target_path: str, **params: Any) -> tuple[Any, Any]:
            answers = [api.get(path, params=params) for api, path in
                       ((src, source_path), (dst, target_path))]
            for answer in answers:
                answer.raise_for_status()
            return answers[0].json(), answers[1].json()

        def differ(what: str, fields: tuple[str, ...], old: dict[str, Any],
                   new: dict[str, Any]) -> None:
            for name in fields:
                if old.get(name) != new.get(name):
                    differences.append(f"{what} {name}: {old.get(name)!r} -> {new.get(name)!r}")

        for experiment_id in sample:
            local = experiments.get(experiment_id)
            if local is None:
                differences.append(f"experiment {experiment_id}: not imported")
                continue
            old, new = both(f"/experiments/{experiment_id}", f"/experiments/{local}")
            what = f"experiment {experiment_id}"
            differ(what, EXPERIMENT_FIELDS, old["experiment"], new["experiment"])
            parent = old["experiment"].get("forkedFrom")
            if experiments.get(parent) != new["experiment"].get("forkedFrom"):
                differences.append(f"{what} forkedFrom: {parent} -> "
                                   f"{new['experiment'].get('forkedFrom')}")
            if old["config"] != new["config"]:
                differences.append(f"{what} config differs")
            old_def, new_def = both(f"/experiments/{experiment_id}/model_def",
                                    f"/experiments/{local}/model_def")
            if old_def["b64Tgz"] != new_def["b64Tgz"]:
                differences.append(f"{what} model definition differs")
            old_trials, new_trials = both(f"/experiments/{experiment_id}/trials",
                                          f"/experiments/{local}/trials", limit=0)
            for trial in old_trials["trials"]:
                local_trial = trials.get(trial["id"])
                mine = [t for t in new_trials["trials"] if t["id"] == local_trial]
                if not mine:
                    differences.append(f"trial {trial['id']}: not imported")
                    continue
                differ(f"trial {trial['id']}", TRIAL_FIELDS, trial, mine[0])
                old_metrics, new_metrics = both(f"/trials/{trial['id']}/metrics",
                                                f"/trials/{local_trial}/metrics")
                seen = {(r["group"], r["stepsCompleted"]): r["metrics"]
                        for r in new_metrics["metrics"]}
                wrong = [r for r in old_metrics["metrics"]
                         if seen.get((r["group"], r["stepsCompleted"])) != r["metrics"]]
                reports += len(old_metrics["metrics"])
                if wrong or len(seen) != len(old_metrics["metrics"]):
                    first = wrong[0] if wrong else None
                    differences.append(
                        f"trial {trial['id']}: {len(wrong)} of {len(old_metrics['metrics'])} "
                        f"reports differ ({len(seen)} on the target)" + (
                            f", e.g. {first['group']} step {first['stepsCompleted']}: "
                            f"{first['metrics']} -> "
                            f"{seen.get((first['group'], first['stepsCompleted']))}"
                            if first else ""))
            old_points, new_points = both(f"/experiments/{experiment_id}/checkpoints",
                                          f"/experiments/{local}/checkpoints", limit=0)
            by_uuid = {c["uuid"]: c for c in new_points["checkpoints"]}
            for checkpoint in old_points["checkpoints"]:
                differ(f"checkpoint {checkpoint['uuid']}", CHECKPOINT_FIELDS, checkpoint,
                       by_uuid.get(checkpoint["uuid"], {}))
    print(f"compared {len(sample)} experiments on both clusters (fields, config, model "
          f"definition, trials, {reports:,} metric reports, checkpoints): "
          f"{len(differences)} differences", flush=True)
    for line in differences[:20]:
        print(f"    {line}", flush=True)
    return differences


# -- the run ----------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="epochal-bench-import-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        storage = root / "checkpoints"
        storage.mkdir()
        began = time.perf_counter()
        with temporal(root) as temporal_address, postgres(root) as pg:
            source_db = pg.ensure_database("epochal_source")
            generating = time.perf_counter()
            history = asyncio.run(generate(source_db, args, storage))
            generated = time.perf_counter() - generating
            totals = asyncio.run(source_totals(source_db))
            print(f"generated in {generated:.1f} s: " + ", ".join(
                f"{v:,} {k}" for k, v in totals.items()), flush=True)
            print(f"  importable (terminal experiments): {history.experiments:,} experiments,"
                  f" {history.trials:,} trials, {history.metrics:,} metric rows,"
                  f" {history.checkpoints:,} checkpoints, {history.logs:,} log lines;"
                  f" {history.non_terminal} PAUSED experiments to skip; experiment"
                  f" {history.unreachable_storage[0]}'s storage unmounted", flush=True)
            with masters(root, pg, temporal_address.result()) as (source, target):
                print(f"clusters up in {time.perf_counter() - began:.1f} s "
                      f"(source {source.url}, target {target.url})", flush=True)
                check_source(source, history, args)
                if args.source_only:
                    print(f"source only: {totals['metrics']:,} metric rows generated in "
                          f"{generated:.1f} s = {totals['metrics'] / generated:,.0f} rows/s")
                    return
                servers = {"source master": source.pid, "target master": target.pid,
                           "PostgreSQL": pg.pid() or 0,
                           "Temporal": read_pid(root / "temporal.pid") or 0}
                measure(args, root, source, target, history, servers)


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """User+system seconds of each server so far, its children's with it (PostgreSQL's
    backends, those still running and those it has reaped)."""
    used = {}
    for name, pid in pids.items():
        try:
            proc = psutil.Process(pid)
            t = proc.cpu_times()
            total = t.user + t.system + t.children_user + t.children_system
            for child in proc.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    c = child.cpu_times()
                    total += c.user + c.system
        except psutil.Error:
            total = 0.0
        used[name] = total
    return used


def cpu_line(run: ImportRun, before: dict[str, float], after: dict[str, float]) -> str:
    """Core-seconds each part spent during a run, the importer's first."""
    parts = {"importer": run.cpu, **{k: after[k] - before[k] for k in after}}
    return (f"CPU during it: {sum(parts.values()):.1f} core-s in {run.seconds:.1f} s ("
            + ", ".join(f"{k} {v:.1f}" for k, v in parts.items()) + ")")


def measure(args: argparse.Namespace, root: Path, source: Master, target: Master,
            history: History, servers: dict[str, int]) -> None:
    dry = run_import(source, target, root, args, "dry-run", "--dry-run")
    counts = dry.summary["counts"]
    wanted = {"experiments": history.experiments, "trials": history.trials,
              "checkpoints": history.checkpoints, "models": history.models,
              "model-versions": history.model_versions}
    print(f"dry run: {dry.seconds:.1f} s, peak RSS {mib(dry.peak_rss)}: " + ", ".join(
        f"{counts.get(k)} {k}" for k in ("users", "workspaces", "projects", "templates",
                                         *wanted)) + f"; {len(dry.summary['skipped'])} to skip",
          flush=True)
    if any(counts.get(k) != v for k, v in wanted.items()):
        raise SystemExit(f"the dry run counts {counts}, the history holds {wanted}")
    before_rss, _ = rss(target.pid)
    cpu_before = cpu_seconds(servers)
    first = run_import(source, target, root, args, "first")
    cpu_after = cpu_seconds(servers)
    after_rss, peak_master = rss(target.pid)
    print(f"import ({'with' if args.logs else 'without'} logs): {first.seconds:.1f} s, "
          f"importer peak RSS {mib(first.peak_rss)}; its summary:", flush=True)
    show_summary(first)
    print(cpu_line(first, cpu_before, cpu_after), flush=True)
    held = asyncio.run(target_counts(target.db_url))
    expected = {"experiments": history.experiments, "trials": history.trials,
                "metrics": history.metrics, "checkpoints": history.checkpoints,
                "models": history.models, "model_versions": history.model_versions,
                "logs": history.logs if args.logs else 0}
    print("target holds: " + ", ".join(
        f"{held[k]:,}/{v:,} {k}" for k, v in expected.items()) + " (held/expected); "
          f"{held['users']} users, {held['workspaces']} workspaces, {held['projects']} "
          f"projects, {held['templates']} templates", flush=True)
    short = {k: (held[k], v) for k, v in expected.items() if held[k] != v}
    if short:
        raise SystemExit(f"the target does not hold the history (held, expected): {short}")
    differences = compare(source, target, history.compared)
    rows_per_s = history.metrics / first.seconds
    experiments_per_s = history.experiments / first.seconds
    print(f"target master RSS {mib(before_rss)} before, {mib(after_rss)} after, peak "
          f"{mib(peak_master)}", flush=True)
    rerun = ""
    if args.rerun:
        cpu_before = cpu_seconds(servers)
        second = run_import(source, target, root, args, "rerun")
        cpu_after = cpu_seconds(servers)
        again = asyncio.run(target_counts(target.db_url))
        if again != held:
            raise SystemExit(f"the second run changed the target: {held} -> {again}")
        print(f"rerun over the same history: {second.seconds:.1f} s, nothing added, peak RSS "
              f"{mib(second.peak_rss)}; its summary:", flush=True)
        show_summary(second, lines=2)
        print(cpu_line(second, cpu_before, cpu_after), flush=True)
        rerun = f"; rerun {second.seconds:.1f} s (nothing added)"
    print(f"import of {history.experiments:,} experiments, {history.metrics:,} metric rows: "
          f"{first.seconds:.1f} s = {rows_per_s:,.0f} rows/s, {experiments_per_s:.1f} "
          f"experiments/s; importer peak RSS {mib(first.peak_rss)}, target master "
          f"{mib(before_rss)} -> {mib(after_rss)} (peak {mib(peak_master)}){rerun}")
    if differences:
        raise SystemExit(f"the target shows {len(differences)} differences from the source "
                         "(listed above)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=2, help="trials per experiment")
    parser.add_argument("--training", type=int, default=475,
                        help="training reports per trial (every 100 batches)")
    parser.add_argument("--validations", type=int, default=50,
                        help="validation reports per trial")
    parser.add_argument("--checkpoints", type=int, default=5,
                        help="checkpoints per trial (the last 2 kept, the others DELETED)")
    parser.add_argument("--models", type=int, default=3, help="models, 2 versions each")
    parser.add_argument("--users", type=int, default=6)
    parser.add_argument("--workspaces", type=int, default=3)
    parser.add_argument("--log-lines", type=int, default=20, help="log lines per trial")
    parser.add_argument("--logs", action="store_true", help="import the trials' logs too")
    parser.add_argument("--parallel", type=int, default=None,
                        help="the importer's --parallel (experiments copied at once; default: "
                             "the importer's)")
    parser.add_argument("--rerun", action="store_true",
                        help="time a second run over the same history (adds nothing)")
    parser.add_argument("--source-only", action="store_true",
                        help="generate the history and check the source's reads; no import")
    # 10 experiments x 2 trials x 500 reports = 10,000 rows, logs and a rerun: every step.
    add_smoke_option(parser, experiments=10, users=2, workspaces=1, models=1, log_lines=5,
                     logs=True, rerun=True)
    run(parse_args(parser))


if __name__ == "__main__":
    main()
