"""`epochal import determined`: copy a Determined cluster's history into the Epochal master the
CLI is logged in to.

The SOURCE is read through Determined's REST API (cli/determined_source.py); what it answers
goes, unchanged, to the TARGET's admin-only `/api/v1/imports` routes, which map it to Epochal's
rows idempotently, keyed by the Determined ids (the import's contract: users, workspaces,
projects, templates, experiments with their trials, metrics, checkpoints (and logs), models,
model versions, in that order, each needing the ones before it).

Resuming: the target says which experiments, trials and trial logs are `done` (and in which
source state); an experiment or trial done in the state it has now is not read again, and each
is marked done once everything under it is in, so an interrupted run goes on where it stopped
and a second run creates nothing. Memory stays bounded: lists are read a page at a time and
metrics and logs streamed and sent in batches; a few experiments are copied at once
(`--parallel`), each by one thread.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any

import typer

from cli import render
from cli.client import JSON, UPLOAD_TIMEOUT, ApiError, Client, CliError, naming
from cli.determined_source import TERMINAL, DeterminedSource, dumps_size

# The most objects the target lists per page.
MAX_DONE_PAGE = 10_000
# What one POST carries: below the target's limits (500 items, 20,000 reports or log lines,
# 64 MiB), so that a batch of large items stays a few MiB.
ITEM_BATCH = 200
ROW_BATCH = 5_000
BODY_BYTES = 16 * 1024 * 1024

STAGES = ("users", "workspaces", "projects", "templates", "experiments", "trials", "metrics",
          "checkpoints", "logs", "models", "model-versions")
TARGET = "the Epochal master"
DELETING = frozenset({"STATE_DELETING", "STATE_DELETE_FAILED", "STATE_DELETED"})


@dataclass
class Options:
    since: datetime | None = None
    logs: bool = False
    parallel: int = 4


@dataclass
class Tally:
    """What the import did, per kind, and every object skipped or refused and every warning;
    shared by the worker threads."""

    created: Counter[str] = field(default_factory=Counter)
    existing: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, kind: str, *, created: int = 0, existing: int = 0) -> None:
        with self._lock:
            self.created[kind] += created
            self.existing[kind] += existing

    def skip(self, kind: str, what: str, reason: str, *, failed: bool = False) -> None:
        with self._lock:
            (self.failed if failed else self.skipped)[kind] += 1
            self.reasons.append(f"{what}: {reason}" + (" (refused by the target)" if failed
                                                       else ""))

    def warn(self, what: str, warning: str) -> None:
        with self._lock:
            self.warnings.append(f"{what}: {warning}")

    def as_json(self) -> JSON:
        return {
            "kinds": {kind: {"created": self.created[kind], "alreadyThere": self.existing[kind],
                             "skipped": self.skipped[kind], "failed": self.failed[kind]}
                      for kind in STAGES},
            "skipped": list(self.reasons), "warnings": list(self.warnings),
        }


class Bars:
    """One progress bar per stage on a terminal (rich, on stderr); without one (CI, a pipe), a
    plain line per stage as it ends and every `every` seconds while it runs."""

    def __init__(self, stream: Any = None, every: float = 10.0) -> None:
        self._stream = stream or sys.stderr
        self._every = every
        self._tty = render._is_tty(self._stream)
        self._tasks: dict[str, Any] = {}
        self._counts: Counter[str] = Counter()
        self._totals: dict[str, int | None] = {}
        self._said = time.monotonic()
        self._lock = threading.Lock()
        self._progress: Any = None

    def __enter__(self) -> Bars:
        if self._tty:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(TextColumn("{task.description:<15}"), BarColumn(),
                                      MofNCompleteColumn(), TimeElapsedColumn(),
                                      console=Console(file=self._stream))
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def start(self, stage: str, total: int | None = None) -> None:
        with self._lock:
            self._totals[stage] = total
            if self._progress is not None and stage not in self._tasks:
                self._tasks[stage] = self._progress.add_task(stage, total=total)

    def advance(self, stage: str, n: int = 1) -> None:
        with self._lock:
            self._counts[stage] += n
            if self._progress is not None:
                self._progress.update(self._tasks[stage], advance=n)
            elif time.monotonic() - self._said >= self._every:
                self._said = time.monotonic()
                self._line(", ".join(self._shown(s) for s in self._tasks_running()))

    def finish(self, *stages: str) -> None:
        with self._lock:
            for stage in stages:
                if self._progress is not None:
                    n = self._counts[stage]
                    self._progress.update(self._tasks[stage], total=n, completed=n)
                else:
                    self._line(f"{self._shown(stage)} done")
                self._totals.pop(stage, None)

    def _tasks_running(self) -> list[str]:
        return list(self._totals)

    def _shown(self, stage: str) -> str:
        total = self._totals.get(stage)
        return f"{stage}: {self._counts[stage]}" + (f"/{total}" if total is not None else "")

    def _line(self, text: str) -> None:
        if text:
            self._stream.write(text + "\n")
            self._stream.flush()


def batches(items: Iterable[Any], count: int, size: int = BODY_BYTES) -> Iterator[list[Any]]:
    """`items` in lists of at most `count` items and about `size` bytes of JSON."""
    batch: list[Any] = []
    used = 0
    for item in items:
        weight = dumps_size(item)
        if batch and (len(batch) >= count or used + weight > size):
            yield batch
            batch, used = [], 0
        batch.append(item)
        used += weight
    if batch:
        yield batch


def prefetched(items: Iterator[Any], depth: int = 1) -> Iterator[Any]:
    """`items`, read ahead by a thread of their own (at most `depth` waiting): the next batch
    streams from the source while the last one is written to the target. An error of the
    reader comes out where its item would have."""
    import queue

    waiting: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()
    end = object()

    def read() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        waiting.put((True, item), timeout=0.5)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            waiting.put((True, end))
        except BaseException as error:  # handed over to the consumer, raised there
            waiting.put((False, error))

    reader = threading.Thread(target=read, name="import-prefetch", daemon=True)
    reader.start()
    try:
        while True:
            ok, item = waiting.get()
            if not ok:
                raise item
            if item is end:
                return
            yield item
    finally:
        stop.set()
        with contextlib.suppress(queue.Empty):
            waiting.get_nowait()  # unblock a reader waiting to put
        reader.join(5)


class Target:
    """The Epochal master's import routes, for one registered source."""

    def __init__(self, client: Client, source_id: int) -> None:
        self.client = client
        self.source_id = source_id
        self.base = f"/imports/{source_id}"

    def _get(self, path: str, params: dict[str, Any]) -> JSON:
        with naming(self.client.master_url, TARGET):
            return dict(self.client.get(path, params))

    def _post(self, path: str, body: JSON) -> JSON:
        with naming(self.client.master_url, TARGET):
            return dict(self.client.post(path, body, timeout=UPLOAD_TIMEOUT))

    @classmethod
    def register(cls, client: Client, source_url: str, master: JSON) -> Target:
        with naming(client.master_url, TARGET):
            answer = client.post("/imports", {
                "kind": "determined", "url": source_url,
                "clusterId": str(master.get("clusterId") or ""),
                "clusterName": str(master.get("clusterName") or ""),
                "version": str(master.get("version") or "")})
        return cls(client, int(answer["sourceId"]))

    def done(self, kind: str) -> dict[str, str | None]:
        """The objects of `kind` the target holds done: external id -> source state."""
        found: dict[str, str | None] = {}
        offset = 0
        while True:
            answer = self._get(f"{self.base}/objects",
                               {"kind": kind, "offset": offset, "limit": MAX_DONE_PAGE})
            objects = answer.get("objects") or []
            for obj in objects:
                if obj.get("done"):
                    found[str(obj["externalId"])] = obj.get("sourceState")
            offset += len(objects)
            if not objects or offset >= int(answer.get("total") or 0):
                return found

    def post(self, kind: str, items: list[JSON]) -> list[JSON]:
        return list(self._post(f"{self.base}/{kind}", {"items": items})["results"])

    def metrics(self, trial_id: str, group: str, reports: list[JSON]) -> JSON:
        """`{"written": n, "warnings": [...]}` for a batch of a trial's reports of `group`."""
        return self._post(f"{self.base}/trials/{trial_id}/metrics",
                          {"group": group, "reports": reports})

    def logs(self, trial_id: str, restart: bool, logs: list[JSON]) -> int:
        answer = self._post(f"{self.base}/trials/{trial_id}/logs",
                            {"restart": restart, "logs": logs})
        return int(answer.get("written") or 0)

    def mark(self, kind: str, ids: list[str], states: list[str]) -> None:
        if ids:
            self._post(f"{self.base}/done",
                       {"kind": kind, "externalIds": ids, "sourceStates": states})


def started(experiment: JSON) -> datetime | None:
    text = experiment.get("startTime")
    if not isinstance(text, str):
        return None
    with contextlib.suppress(ValueError):
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    return None


def inactive_reason(state: str) -> str:
    name = state.removeprefix("STATE_")
    if state in DELETING:
        return f"{name} on the source: it is being deleted there"
    return f"{name} on the source: finish or kill it, then run the import again"


class Importer:
    """One run of the import: the stages in order, the summary in `tally`."""

    def __init__(self, source: DeterminedSource, target: Target, options: Options,
                 bars: Bars) -> None:
        self.source = source
        self.target = target
        self.options = options
        self.bars = bars
        self.tally = Tally()
        self.skipped_experiments: set[int] = set()
        # What the target holds done (external id -> source state), read once at the start.
        self.done_trials: dict[str, str | None] = {}
        self.done_logs: dict[str, str | None] = {}
        # The experiments of this run being sent: a fork waits until its parent is in.
        self._posted: dict[int, threading.Event] = {}

    # Objects sent as they are listed.

    def send(self, kind: str, items: list[JSON], label: Callable[[JSON], str]) -> list[JSON]:
        """Post `items` in batches; the items the target took (with their result). A batch
        the target refuses (400) is sent again item by item, so one bad item is reported and
        the others go in."""
        taken: list[JSON] = []
        for batch in batches(items, ITEM_BATCH):
            try:
                results = self.target.post(kind, batch)
            except ApiError as err:
                if err.status != 400:
                    raise
                results = []
                for item in batch:
                    try:
                        results.extend(self.target.post(kind, [item]))
                    except ApiError as one:
                        if one.status != 400:
                            raise
                        self.tally.skip(kind, label(item), "; ".join([one.message, *one.details]),
                                        failed=True)
                        results.append({})
            for item, result in zip(batch, results, strict=True):
                if not result:
                    continue
                for warning in result.get("warnings") or []:
                    self.tally.warn(label(item), str(warning))
                if result.get("skipped"):
                    self.tally.skip(kind, label(item), str(result["skipped"]))
                    continue
                self.tally.count(kind, created=int(bool(result.get("created"))),
                                 existing=int(not result.get("created")))
                taken.append(item)
            self.bars.advance(kind, len(batch))
        return taken

    def listed(self, kind: str, pages: Iterable[list[JSON]], noun: str) -> list[JSON]:
        """Every page of a list sent; the items taken (small kinds only: users, workspaces,
        models, whose names later stages need)."""
        self.bars.start(kind)
        taken: list[JSON] = []
        for page in pages:
            taken.extend(self.send(kind, page, lambda i: f"{noun} {i.get('id')} "
                                                         f"({i.get('name') or i.get('username')})"))
        self.bars.finish(kind)
        return taken

    def run(self) -> Tally:
        self.listed("users", self.source.users(), "user")
        workspaces = self.listed("workspaces", self.source.workspaces(), "workspace")
        self.bars.start("projects")
        for workspace in workspaces:
            for page in self.source.projects(int(workspace["id"])):
                self.send("projects", page, lambda p: f"project {p.get('id')} ({p.get('name')})")
        self.bars.finish("projects")
        self.bars.start("templates")
        for page in self.source.templates():
            self.send("templates", page, lambda t: f"template {t.get('name')}")
        self.bars.finish("templates")
        self.experiments()
        models = self.listed("models", self.source.models(), "model")
        self.bars.start("model-versions")
        for model in models:
            for page in self.source.model_versions(str(model["name"])):
                self.send("model-versions", self._importable_versions(page),
                          lambda v: f"model version {v.get('model', {}).get('name')} "
                                    f"v{v.get('version')}")
        self.bars.finish("model-versions")
        return self.tally

    def _importable_versions(self, page: list[JSON]) -> list[JSON]:
        kept = []
        for version in page:
            training = (version.get("checkpoint") or {}).get("training") or {}
            experiment_id = training.get("experimentId")
            if experiment_id in self.skipped_experiments:
                self.tally.skip("model-versions", f"model version {version['model']['name']} "
                                f"v{version.get('version')}", f"its checkpoint's experiment "
                                f"{experiment_id} was not imported")
                continue
            kept.append(version)
        return kept

    # Experiments, each with its trials, metrics, checkpoints and logs.

    def experiments(self) -> None:
        done = self.target.done("experiment")
        self.done_trials = self.target.done("trial")
        self.done_logs = self.target.done("trial-logs") if self.options.logs else {}
        total = self.source.total("/experiments", "experiments")
        stages = ("experiments", "trials", "metrics", "checkpoints",
                  *(["logs"] if self.options.logs else []))
        for stage in stages:
            self.bars.start(stage, total if stage == "experiments" else None)
        window = threading.BoundedSemaphore(self.options.parallel * 2)
        failures: list[BaseException] = []

        def ended(future: Future[None]) -> None:
            window.release()
            error = None if future.cancelled() else future.exception()
            if error is not None:
                failures.append(error)

        pool = ThreadPoolExecutor(self.options.parallel, thread_name_prefix="import")
        try:
            for page in self.source.experiments():
                for summary in page:
                    if failures:
                        break
                    job = self._plan(summary, done)
                    if job is None:
                        self.bars.advance("experiments")
                        continue
                    window.acquire()
                    pool.submit(job, summary).add_done_callback(ended)
                if failures:
                    break
        finally:
            # On a failure (or an interrupt) the queued experiments are dropped, not started.
            pool.shutdown(wait=True, cancel_futures=bool(failures) or sys.exc_info()[0] is not None)
        if failures:
            raise failures[0]
        self.bars.finish(*stages)

    def _plan(self, summary: JSON, done: dict[str, str | None]
              ) -> Callable[[JSON], None] | None:
        """What to do with a listed experiment: nothing (skipped, or done in this state), only
        its logs, or all of it."""
        experiment_id = int(summary["id"])
        state = str(summary.get("state"))
        what = f"experiment {experiment_id} ({summary.get('name')})"
        if state not in TERMINAL:
            self.skipped_experiments.add(experiment_id)
            self.tally.skip("experiments", what, inactive_reason(state))
            return None
        key = str(experiment_id)
        since = self.options.since
        start = started(summary)
        old = since is not None and start is not None and start < since
        if key in done and (done[key] == state or old):
            self.tally.count("experiments", existing=1)
            return self._logs_only if self.options.logs else None
        self._posted[experiment_id] = threading.Event()
        return self._experiment

    def _experiment(self, summary: JSON) -> None:
        experiment_id = int(summary["id"])
        try:
            detail = self.source.experiment(experiment_id)
            experiment = detail.get("experiment") or summary
            parent = experiment.get("forkedFrom")
            if isinstance(parent, int) and parent in self._posted:
                self._posted[parent].wait()
            item = {"experiment": experiment, "config": detail.get("config"),
                    "modelDefinition": self.source.model_definition(experiment_id)}
            taken = self.send("experiments", [item],
                              lambda i: f"experiment {experiment_id} ({experiment.get('name')})")
        finally:
            self._posted[experiment_id].set()
        if not taken:
            self.skipped_experiments.add(experiment_id)
            return
        self._trials(experiment_id, logs_only=False)
        self.target.mark("experiment", [str(experiment_id)], [str(experiment.get("state"))])

    def _logs_only(self, summary: JSON) -> None:
        self._trials(int(summary["id"]), logs_only=True)
        self.bars.advance("experiments")

    def _trials(self, experiment_id: int, *, logs_only: bool) -> None:
        for page in self.source.trials(experiment_id):
            todo = []
            for trial in page:
                key, state = str(trial["id"]), str(trial.get("state"))
                if logs_only or self.done_trials.get(key) == state:
                    self.tally.count("trials", existing=1)
                    self.bars.advance("trials")
                else:
                    todo.append(trial)
            for trial in self.send("trials", todo, lambda t: f"trial {t.get('id')}"):
                self._trial(trial)
            if self.options.logs:
                for trial in page:
                    if self.done_logs.get(str(trial["id"])) != str(trial.get("state")):
                        self._logs(trial)

    def _trial(self, trial: JSON) -> None:
        """A trial's metrics of every group and its checkpoints, then the trial marked done."""
        trial_id = int(trial["id"])
        for group in self.source.metric_groups(trial):
            for reports in prefetched(batches(self.source.metrics(trial_id, group), ROW_BATCH)):
                answer = self.target.metrics(str(trial_id), group, reports)
                written = int(answer.get("written") or 0)
                for warning in answer.get("warnings") or []:
                    self.tally.warn(f"trial {trial_id}'s {group} metrics", str(warning))
                self.tally.count("metrics", created=written, existing=len(reports) - written)
                self.bars.advance("metrics", len(reports))
        for page in self.source.checkpoints(trial_id):
            self.send("checkpoints", page, lambda c: f"checkpoint {c.get('uuid')}")
        self.target.mark("trial", [str(trial_id)], [str(trial.get("state"))])

    def _logs(self, trial: JSON) -> None:
        trial_id = str(trial["id"])
        restart = True
        for lines in prefetched(batches(self.source.logs(int(trial_id)), ROW_BATCH)):
            written = self.target.logs(trial_id, restart, lines)
            restart = False
            self.tally.count("logs", created=written, existing=len(lines) - written)
            self.bars.advance("logs", len(lines))
        if restart:  # no line: what an earlier, interrupted run sent is cleared all the same
            self.target.logs(trial_id, True, [])
        self.target.mark("trial-logs", [trial_id], [str(trial.get("state"))])


def count_source(source: DeterminedSource, options: Options) -> tuple[JSON, list[str]]:
    """What would come, counted from the source's paginations; nothing is written anywhere."""
    counts: Counter[str] = Counter()
    skipped: list[str] = []
    counts["users"] = source.total("/users", "users")
    for page in source.workspaces():
        counts["workspaces"] += len(page)
        for workspace in page:
            counts["projects"] += source.total(f"/workspaces/{workspace['id']}/projects",
                                               "projects")
    counts["templates"] = source.total("/templates", "templates")
    importable: list[int] = []
    for page in source.experiments():
        for summary in page:
            state = str(summary.get("state"))
            start = started(summary)
            if state not in TERMINAL:
                skipped.append(f"experiment {summary['id']} ({summary.get('name')}): "
                               f"{inactive_reason(state)}")
            elif options.since is None or start is None or start >= options.since:
                importable.append(int(summary["id"]))
                counts["experiments"] += 1
                counts["trials"] += int(summary.get("numTrials") or 0)
    with ThreadPoolExecutor(options.parallel) as pool:
        counts["checkpoints"] = sum(pool.map(
            lambda e: source.total(f"/experiments/{e}/checkpoints", "checkpoints"), importable))
    for page in source.models():
        counts["models"] += len(page)
        counts["model-versions"] += sum(int(m.get("numVersions") or 0) for m in page)
    return dict(counts), skipped


def print_summary(tally: Tally) -> None:
    table = render.table("kind", "created", "already there", "skipped", "refused")
    for kind in STAGES:
        row = (tally.created[kind], tally.existing[kind], tally.skipped[kind], tally.failed[kind])
        if any(row):
            table.add_row(kind, *(str(n) for n in row))
    render.show(table)
    for title, lines in (("Skipped", tally.reasons), ("Warnings", tally.warnings)):
        if lines:
            render.say(f"{title} ({len(lines)}):")
            for line in lines:
                render.say(f"  {line}")


def check_parallel(parallel: int) -> None:
    if not 1 <= parallel <= 16:
        raise CliError(f"--parallel must be 1 to 16, not {parallel}", exit_code=2)


# The command.

app = typer.Typer(help="Import another cluster's history into this master.",
                  no_args_is_help=True)


def _since(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(f"--since {value!r} is not a time (give an ISO 8601 one, e.g. "
                       "2026-01-31T12:00:00Z)", exit_code=2) from None
    if moment.tzinfo is None:
        raise CliError(f"--since {value!r} has no time zone (end it in Z or +HH:MM)",
                       exit_code=2)
    return moment


@app.command("determined", help=(
    "Copy a Determined cluster's history through its REST API: users (without passwords), "
    "workspaces, projects, templates, finished experiments with their trials, metrics and "
    "checkpoints (the files stay in their storage), the model registry, and with --logs the "
    "trials' logs. Run it again at any time: it creates nothing twice and goes on where an "
    "interrupted run stopped. Needs an admin's login on both clusters."))
def determined(
    ctx: typer.Context,
    source_master: Annotated[str, typer.Option(
        "--master", help="The Determined master to import from (its URL).",
        show_default=False)],
    user: Annotated[str, typer.Option(
        "-u", "--user", envvar="DET_USER",
        help="Determined user to log in as (env DET_USER); the password comes from env "
             "DET_PASS or is asked for.")] = "admin",
    token: Annotated[str | None, typer.Option(
        "--token", envvar="DET_USER_TOKEN",
        help="A Determined token (`det token create`, env DET_USER_TOKEN) instead of a "
             "password.", show_default=False)] = None,
    since: Annotated[str | None, typer.Option(
        "--since", help="Only experiments started at or after this time (ISO 8601), and any "
                        "not yet imported: a second pass before the switch-over.",
        show_default=False)] = None,
    logs: Annotated[bool, typer.Option("--logs", help="Also copy the trials' logs.")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Only count what would come; nothing is written.")] = False,
    parallel: Annotated[int, typer.Option(
        "--parallel", help="Experiments copied at once (1 to 16).")] = 4,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    from cli.client import master_url, resolve_master
    from cli.user import ask_password

    options = Options(since=_since(since), logs=logs, parallel=parallel)
    check_parallel(parallel)
    source_url = resolve_master(source_master)
    target_url = master_url(ctx)
    if source_url == target_url:
        raise CliError(f"the source and the target are the same master ({source_url}): give "
                       "the Determined master as --master and this CLI's master with -m "
                       "before `import`", exit_code=2)
    if token:
        source = DeterminedSource(source_url, token)
    else:
        password = ask_password(f"Password for {user} at {source_url}", env_name="DET_PASS")
        source = DeterminedSource.login(source_url, user, password)
    try:
        master = source.master()
        if dry_run:
            counts, skipped = count_source(source, options)
            _print_dry_run(as_json, source_url, counts, skipped)
            return
        with Client(target_url) as client:
            target = Target.register(client, source_url, master)
            with Bars() as bars:
                tally = Importer(source, target, options, bars).run()
    except (KeyError, TypeError, ValueError) as err:  # an answer of an unexpected shape
        raise CliError(f"the import stopped on an answer it did not expect ({type(err).__name__}: "
                       f"{err}); what was imported stays, and a later run goes on from there"
                       ) from None
    finally:
        source.close()
    if as_json:
        render.print_json({"source": source_url, "sourceId": target.source_id,
                           **tally.as_json()})
    else:
        print_summary(tally)
    if sum(tally.failed.values()):
        raise CliError(f"{sum(tally.failed.values())} object(s) were refused by the target "
                       "(listed above); fix them and run the import again")


def _print_dry_run(as_json: bool, url: str, counts: JSON, skipped: list[str]) -> None:
    if as_json:
        render.print_json({"source": url, "dryRun": True, "counts": counts, "skipped": skipped})
        return
    render.say(f"Would import from {url} (nothing was written):")
    table = render.table("kind", "count")
    for kind in STAGES:
        if kind in counts:
            table.add_row(kind, str(counts[kind]))
    table.add_row("metrics, logs", "streamed during the import (not counted)")
    render.show(table)
    if skipped:
        render.say(f"Skipped ({len(skipped)}):")
        for line in skipped:
            render.say(f"  {line}")
