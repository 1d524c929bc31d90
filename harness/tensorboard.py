"""The program a TENSORBOARD task runs: TensorBoard over the metrics Epochal stores.

``det tensorboard start EXP [EXP...]`` (or ``-t TRIAL``) starts a task whose agent runs::

    python -m harness.tensorboard --host H --port P --path-prefix /proxy/<taskId> \\
        --experiment-ids 1,2 --trial-ids 5 --logdir DIR

with ``DET_MASTER`` (or ``EPOCHAL_MASTER``) and ``DET_USER_TOKEN`` (a session of the task's owner)
in its environment. Training code on Epochal reports metrics to the master rather than writing
tfevents files, so this reads every trial's training and validation reports through the REST API,
writes them as event files (one run directory per trial, ``experiment_<e>/trial_<t>``, scalars
tagged as Determined's TensorBoard tags them, the step being the batches trained), serves them
with TensorBoard under the proxy's prefix, and keeps appending what trials report afterwards.

It exits with TensorBoard. A problem found before TensorBoard starts (no such experiment, the
token refused, the master out of reach) is one line on stderr and a non-zero exit code; one met
while refreshing is logged, and the next refresh tries again.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import math
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from harness.core import APIError, MasterError
from harness.core._session import Session

logger = logging.getLogger("harness.tensorboard")

MASTER_ENVS = ("EPOCHAL_MASTER", "DET_MASTER")
TOKEN_ENV = "DET_USER_TOKEN"

TRAINING, VALIDATION = "training", "validation"
GROUPS = (TRAINING, VALIDATION)
# common/states.py's terminal states as the API spells them (a task environment has the harness
# only): a trial in one of these reports nothing more until it runs again.
ENDED_STATES = frozenset({"STATE_COMPLETED", "STATE_CANCELED", "STATE_ERROR", "STATE_DELETED"})

MAX_IDS = 1_000
MAX_RUNS = 1_000  # trials shown at once: each holds an open event file and its writer thread
TRIAL_PAGE = 500
REPORT_PAGE = 1_000
DEFAULT_REFRESH_SECONDS = 15.0
REFRESH_SECONDS_RANGE = (0.5, 3_600.0)
INT32_MAX = 2**31 - 1

Report = Mapping[str, Any]  # one row of GET /api/v1/trials/{id}/metrics


def scalar_tag(group: str, name: str) -> str:
    """Determined's tag for a metric (determined/tensorboard/metric_writers/callback.py), so a
    user's TensorBoard habits carry over: ``Determined/loss``, ``Determined/val_loss``."""
    if group == VALIDATION and not name.startswith("val"):
        name = "val_" + name
    return "Determined/" + name


def is_scalar(value: object) -> bool:
    """What Determined writes to TensorBoard: numbers (its ``is_numerical_scalar``)."""
    return isinstance(value, int | float)


def report_time(report: Report) -> float:
    stamp = report.get("reportTime")
    if isinstance(stamp, str):
        try:
            return datetime.fromisoformat(stamp).timestamp()
        except ValueError:
            pass
    return time.time()


class RunWriter:
    """One trial's run directory: its event file, and the last step written of each group, from
    which the next refresh reads on."""

    def __init__(self, directory: Path) -> None:
        from tensorboard.summary import Writer  # type: ignore[import-untyped]

        self.last_steps: dict[str, int] = {}
        self._writer = Writer(str(directory))

    def write(self, group: str, reports: Iterable[Report]) -> int:
        """Append the group's reports (in step order) as scalars; answers how many were written."""
        written = 0
        for report in reports:
            step = report["stepsCompleted"]
            wall_time = report_time(report)
            for name, value in report["metrics"].items():
                if is_scalar(value):
                    self._writer.add_scalar(
                        scalar_tag(group, name), value, step, wall_time=wall_time
                    )
                    written += 1
            self.last_steps[group] = max(step, self.last_steps.get(group, step))
        return written

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


@dataclass(frozen=True)
class TrialRef:
    id: int
    experiment_id: int
    ended: bool

    @classmethod
    def of(cls, trial: Mapping[str, Any]) -> TrialRef:
        return cls(trial["id"], trial["experimentId"], trial.get("state") in ENDED_STATES)

    @property
    def run_name(self) -> str:
        return f"experiment_{self.experiment_id}/trial_{self.id}"


class MetricReader:
    """Trials and their reports through the master's REST API, every answer bounded."""

    def __init__(self, session: Session, *, page_size: int = REPORT_PAGE) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        self._session = session
        self.page_size = page_size

    def experiment_trials(self, experiment_id: int) -> Iterator[TrialRef]:
        offset = 0
        while True:
            answer = self._session.get(
                f"/api/v1/experiments/{experiment_id}/trials",
                params={"limit": TRIAL_PAGE, "offset": offset},
            )
            trials = answer["trials"]
            yield from (TrialRef.of(t) for t in trials)
            offset += len(trials)
            if not trials or offset >= answer["pagination"]["total"]:
                return

    def trial(self, trial_id: int) -> TrialRef:
        return TrialRef.of(self._session.get(f"/api/v1/trials/{trial_id}")["trial"])

    def reports(self, trial_id: int, group: str, after: int | None) -> Iterator[list[Report]]:
        """The trial's reports of ``group`` past step ``after``, in step order, in pages of at
        most ``page_size``."""
        return self._pages(trial_id, group, 0 if after is None else after + 1, None)

    def _pages(
        self, trial_id: int, group: str, start: int, end: int | None
    ) -> Iterator[list[Report]]:
        """Pages of the reports in steps [start, end].

        The route's only bound is ``maxDatapoints`` (M): a range of at most M reports comes back
        whole, a longer one as M or fewer of them, the first, the last and every k-th between
        (api/routes/metrics.py). Asked for M = 2 * page_size + 2, a downsampled answer holds more
        than page_size reports, so an answer of page_size or fewer is the whole range. A longer
        answer marks where to cut the range into parts of about equal counts; the parts are read
        the same way, as many at once as the first one's count says fit in a page.
        """
        params: dict[str, str | int] = {
            "group": group, "startBatches": start, "maxDatapoints": 2 * self.page_size + 2,
        }
        if end is not None:
            params["endBatches"] = end
        rows: list[Report] = self._session.get(
            f"/api/v1/trials/{trial_id}/metrics", params=params
        )["metrics"]
        if len(rows) <= self.page_size:
            if rows:
                yield rows
            return
        marks = [row["stepsCompleted"] for row in rows]
        last = len(marks) - 1
        index, per_mark = 0, 0
        while index < last:
            reach = 1 if not per_mark else max(1, self.page_size // per_mark)
            upto = min(index + reach, last)
            stop = marks[last] if upto == last else marks[upto] - 1
            count = 0
            for page in self._pages(trial_id, group, marks[index], stop):
                count += len(page)
                yield page
            per_mark = math.ceil(count / (upto - index))
            index = upto


@dataclass
class Refresher:
    """Writes what the trials reported since the last pass into their run directories."""

    reader: MetricReader
    logdir: Path
    experiment_ids: list[int]
    trial_ids: list[int]
    runs: dict[int, RunWriter] = field(default_factory=dict)
    _finished: set[int] = field(default_factory=set)
    _warned_cap: bool = False
    _started: bool = False

    def trials(self) -> list[TrialRef]:
        found: dict[int, TrialRef] = {}
        for experiment_id in list(self.experiment_ids):
            with self._unless_deleted("experiment", experiment_id, self.experiment_ids):
                for trial in self.reader.experiment_trials(experiment_id):
                    found[trial.id] = trial
        for trial_id in list(self.trial_ids):
            with self._unless_deleted("trial", trial_id, self.trial_ids):
                found[trial_id] = self.reader.trial(trial_id)
        return list(found.values())

    @contextmanager
    def _unless_deleted(self, kind: str, ident: int, ids: list[int]) -> Iterator[None]:
        """At the start an unknown id is the user's mistake; later it was deleted, and the
        others are still shown."""
        try:
            yield
        except APIError as e:
            if e.status_code != 404 or not self._started:
                raise
            logger.warning("%s %d was deleted; its runs stay as written", kind, ident)
            ids.remove(ident)

    def refresh(self) -> int:
        """One pass over every trial; answers how many points were written.

        A trial seen ended, once read, is skipped until it runs again."""
        written = 0
        for trial in self.trials():
            if trial.ended and trial.id in self._finished:
                continue
            run = self._run(trial)
            if run is None:
                continue
            for group in GROUPS:
                for page in self.reader.reports(trial.id, group, run.last_steps.get(group)):
                    written += run.write(group, page)
            run.flush()
            if trial.ended:
                self._finished.add(trial.id)
            else:
                self._finished.discard(trial.id)
        self._started = True
        return written

    def _run(self, trial: TrialRef) -> RunWriter | None:
        run = self.runs.get(trial.id)
        if run is None:
            if len(self.runs) >= MAX_RUNS:
                if not self._warned_cap:
                    logger.warning("showing the first %d trials only; trial %d and later ones"
                                   " are left out", MAX_RUNS, trial.id)
                    self._warned_cap = True
                return None
            run = self.runs[trial.id] = RunWriter(self.logdir / trial.run_name)
        return run

    def keep_refreshing(self, interval: float) -> None:
        """Refresh every ``interval`` seconds; a failed pass is logged and the next one tries
        again, so TensorBoard keeps serving what was written."""
        while True:
            time.sleep(interval)
            try:
                written = self.refresh()
            except Exception as e:
                logger.warning("could not refresh the metrics (trying again in %gs): %s",
                               interval, e)
            else:
                if written:
                    logger.info("wrote %d new points", written)


class UsageError(Exception):
    """A problem the task's user can act on, said in one line."""


def id_list(text: str) -> list[int]:
    """A comma-separated list of ids, as the agent passes them ("" for none)."""
    ids: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        if not part.isdigit() or not 0 < int(part) <= INT32_MAX:
            raise argparse.ArgumentTypeError(f"expected ids (positive integers), got {part!r}")
        ids.append(int(part))
    if len(ids) > MAX_IDS:
        raise argparse.ArgumentTypeError(f"at most {MAX_IDS} ids, got {len(ids)}")
    return list(dict.fromkeys(ids))


def port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"expected a TCP port (1 to 65535), got {text!r}")
    return int(text)


def refresh_seconds(text: str) -> float:
    low, high = REFRESH_SECONDS_RANGE
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not low <= seconds <= high:
        raise argparse.ArgumentTypeError(f"expected seconds from {low:g} to {high:g}, got {text!r}")
    return seconds


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m harness.tensorboard",
        description="TensorBoard over the training and validation metrics Epochal stores.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=port, required=True)
    parser.add_argument("--path-prefix", default="",
                        help="where the master's proxy serves it: /proxy/<taskId>")
    parser.add_argument("--experiment-ids", type=id_list, default=[], metavar="ID,ID")
    parser.add_argument("--trial-ids", type=id_list, default=[], metavar="ID,ID")
    parser.add_argument("--logdir", type=Path, required=True,
                        help="where the event files are written")
    parser.add_argument("--refresh-seconds", type=refresh_seconds,
                        default=DEFAULT_REFRESH_SECONDS,
                        help="how often new metrics are read (default %(default)gs)")
    args = parser.parse_args(argv)
    if not args.experiment_ids and not args.trial_ids:
        parser.error("nothing to show: give --experiment-ids or --trial-ids")
    return args


def master_session(environ: Mapping[str, str]) -> Session:
    url = next((environ[name] for name in MASTER_ENVS if environ.get(name)), "")
    if not url:
        raise UsageError(f"{' or '.join(MASTER_ENVS)} is not set: the master's URL is needed")
    if "://" not in url:
        url = "http://" + url
    token = environ.get(TOKEN_ENV)
    if not token:
        raise UsageError(f"{TOKEN_ENV} is not set: a session token of the task's owner is needed")
    return Session(url, token=token, retries=3)


def refusal(error: APIError, master_url: str) -> UsageError:
    if error.status_code == 401:
        return UsageError(f"the master at {master_url} refused the token in {TOKEN_ENV}:"
                          f" {error.message}")
    if error.status_code == 404:
        return UsageError(error.message)
    return UsageError(str(error))


def serve(args: argparse.Namespace) -> int:
    """TensorBoard on --host/--port under --path-prefix, in this thread, until it exits."""
    from tensorboard import program  # type: ignore[import-untyped]

    # TensorBoard writes a file named by its pid under the temporary directory: /tmp's, shared
    # by every user's TensorBoard on the agent, is another user's once theirs made it (and a
    # sandboxed run's pid repeats), so the first TensorBoard's owner would be the only one.
    private = args.logdir.with_name(f"{args.logdir.name}-tmp")
    private.mkdir(parents=True, exist_ok=True)
    tempfile.tempdir = str(private)
    board = program.TensorBoard(server_class=program.WerkzeugServer)
    board.configure(argv=[
        "tensorboard", "--logdir", str(args.logdir), "--host", args.host,
        "--port", str(args.port), "--path_prefix", args.path_prefix,
        # Determined's choice: the Python loader, which rereads the logdir every interval.
        "--load_fast", "false", "--reload_interval", str(max(1, round(args.refresh_seconds))),
    ])
    code: int = board.main()
    return code


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """Write what is stored, then serve it while a thread appends what comes; the thread dies
    with the process (every pass ends flushed)."""
    if importlib.util.find_spec("tensorboard") is None:
        raise UsageError("the tensorboard package is not installed in the task environment")
    session = master_session(environ)
    refresher = Refresher(MetricReader(session), args.logdir, args.experiment_ids,
                          args.trial_ids)
    try:
        written = refresher.refresh()
    except APIError as e:
        raise refusal(e, session.master_url) from None
    except MasterError as e:
        raise UsageError(str(e)) from None
    logger.info("wrote %d points of %d trials to %s", written, len(refresher.runs), args.logdir)
    threading.Thread(target=refresher.keep_refreshing, args=(args.refresh_seconds,),
                     name="refresh", daemon=True).start()
    return serve(args)


def main(argv: Sequence[str] | None = None) -> int:
    # TensorBoard's and werkzeug's INFO lines (every reload, every request) would flood the
    # task's logs.
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    logger.setLevel(logging.INFO)
    args = parse_args(argv)
    try:
        return run(args, os.environ)
    except UsageError as e:
        print(f"harness.tensorboard: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
