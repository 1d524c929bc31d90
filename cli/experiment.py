"""`epochal experiment ...`: create, follow, list, describe, logs, pause/activate/cancel/kill."""

from __future__ import annotations

import re
import shlex
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from types import SimpleNamespace
from typing import Annotated, Any, TextIO

import typer

from cli import model_dir, render
from cli.client import (
    ApiError,
    Client,
    CliError,
    ConnectionLost,
    MasterUnreachable,
    master_url,
)

app = typer.Typer(help="Create, watch and control experiments.", no_args_is_help=True)

# Seconds between two looks at a followed experiment's state (tests set 0).
POLL_SECONDS = 2.0
# How long the state may stay unreadable (master restarting) before following gives up.
UNREACHABLE_GIVE_UP_SECONDS = 120.0
# How long to let the log stream drain after the experiment is terminal.
LOG_DRAIN_SECONDS = 15.0

EXIT_COMPLETED = 0
EXIT_ERROR = 1
EXIT_CANCELED = 3
EXIT_INTERRUPTED = 130

FOLLOW_EXIT_CODES = (
    "Exit codes with --follow: 0 the experiment COMPLETED, 1 it ended in ERROR, 3 it was "
    "CANCELED (or killed), 130 you stopped following with Ctrl-C (the experiment keeps running)."
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print the server's JSON.")]
IdArg = Annotated[int, typer.Argument(help="Experiment id.", metavar="ID", show_default=False)]


# -- config and model directory ---------------------------------------------------------------


def _invalid(path: str, errors: Sequence[str]) -> CliError:
    return CliError(f"invalid experiment config {path}:", list(errors), exit_code=2)


def load_config(path: Path, partial: bool = False) -> tuple[str, Any]:
    """The config's text and model, validated locally (exit 2 with every error at once if it is
    wrong). A `partial` config (a template completes it on the master, which validates the
    merge) is only read as YAML."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CliError(f"experiment config {path} does not exist", exit_code=2) from None
    except IsADirectoryError:
        raise CliError(f"experiment config {path} is a directory", exit_code=2) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read experiment config {path}: {exc}", exit_code=2) from None

    import yaml

    from common.expconf import (
        PLACEHOLDER_STORAGE,
        ConfigError,
        load_config_yaml,
        parse_experiment_config,
    )

    if partial:
        try:
            data = load_config_yaml(text, source=str(path))
        except ConfigError as exc:
            raise _invalid(str(path), exc.errors) from None
        if not isinstance(data, dict):
            raise _invalid(str(path), ["a config is a mapping of config fields"])
        return text, SimpleNamespace(entrypoint=data.get("entrypoint"))
    try:
        parsed = parse_experiment_config(
            text, source=str(path), default_storage=PLACEHOLDER_STORAGE
        )
    except ConfigError as exc:
        errors = list(getattr(exc, "errors", None) or [str(exc)])
        raise _invalid(str(path), errors) from None
    except yaml.YAMLError as exc:  # the parser reports bad YAML itself; this is a safety net
        raise _invalid(str(path), [str(exc)]) from None
    return text, parsed


_PYTHON = re.compile(r"^(.*/)?python(\d+(\.\d+)?)?$")
# Options of the python interpreter that take a value as the next word.
_PYTHON_OPTIONS_WITH_VALUE = {"-W", "-X", "-Q"}


def entrypoint_script(entrypoint: Any) -> str | None:
    """The script an entrypoint like `python3 train.py --lr 1` runs (None when it runs no .py
    file of the model directory, e.g. `python3 -m package` or a command on the PATH)."""
    if isinstance(entrypoint, str):
        try:
            words = shlex.split(entrypoint)
        except ValueError:
            return None
    elif isinstance(entrypoint, list) and all(isinstance(w, str) for w in entrypoint):
        words = list(entrypoint)
    else:
        return None
    if not words or not _PYTHON.match(words[0]):
        return None
    rest = iter(words[1:])
    for word in rest:
        if word in ("-m", "-c", "-"):
            return None
        if word in _PYTHON_OPTIONS_WITH_VALUE:
            next(rest, None)
            continue
        if word.startswith("-"):
            continue
        return word if word.endswith(".py") else None
    return None


def check_entrypoint(config_path: Path, entrypoint: Any, directory: Path) -> str | None:
    """Fail (exit 2) when the entrypoint's script is not in the model directory; return the
    script's path inside it."""
    script = entrypoint_script(entrypoint)
    if script is None:
        return None
    if PurePosixPath(script).is_absolute():
        return None  # a script of the task image, not of the model directory
    if not (directory / script).is_file():
        raise CliError(
            f"the entrypoint of {config_path} runs {script}, but the model directory "
            f"{directory} has no file {script}",
            exit_code=2,
        )
    return PurePosixPath(script).as_posix().removeprefix("./")


# -- follow -----------------------------------------------------------------------------------


def log_line(record: Any, prefixed: bool) -> str | None:
    log = record.get("result", record) if isinstance(record, Mapping) else None
    if not isinstance(log, Mapping):
        return None
    text = str(log.get("log") or "").rstrip("\n")
    if not prefixed:
        return text
    prefix = f"[trial {log.get('trialId', '?')}] "
    return "\n".join(prefix + line for line in text.split("\n"))


def print_logs(client: Client, path: str, follow: bool, prefixed: bool, as_json: bool) -> None:
    import json

    params = {"follow": "true" if follow else "false"}
    for record in client.stream_ndjson(path, params):
        if as_json:
            sys.stdout.write(json.dumps(record) + "\n")
        else:
            line = log_line(record, prefixed)
            if line is None:
                continue
            sys.stdout.write(line + "\n")
        sys.stdout.flush()


class _LogPump(threading.Thread):
    """Streams an experiment's logs while the main thread watches its state.

    Reconnects (skipping lines already shown, by log id) when the stream breaks or ends early,
    e.g. while the master restarts; stops when the stream has ended and the experiment is
    terminal, or when told to.
    """

    def __init__(self, master: str, experiment_id: int, out: TextIO):
        super().__init__(name=f"logs-{experiment_id}", daemon=True)
        self.master = master
        self.experiment_path = f"/experiments/{experiment_id}"
        self.path = f"{self.experiment_path}/logs"
        self.out = out
        self.stop = threading.Event()
        self.seen: set[Any] = set()
        self.problem: str | None = None

    def run(self) -> None:
        try:
            with Client(self.master) as client:
                while not self.stop.is_set():
                    try:
                        self._stream(client)
                        # The stream ends once the experiment is terminal; a master shutting
                        # down may also end it cleanly, so look before giving up.
                        experiment = client.get(self.experiment_path)["experiment"]
                        if render.is_terminal(experiment.get("state")):
                            return
                    except (ConnectionLost, MasterUnreachable):
                        pass
                    if self.stop.wait(max(POLL_SECONDS, 0.05)):
                        return
        except CliError as exc:
            self.problem = exc.message
        except Exception as exc:  # never a thread traceback in the middle of the output
            self.problem = f"{type(exc).__name__}: {exc}"

    def _stream(self, client: Client) -> None:
        for record in client.stream_ndjson(self.path, {"follow": "true"}):
            if self.stop.is_set():
                return
            log = record.get("result", record) if isinstance(record, Mapping) else None
            ident = log.get("id") if isinstance(log, Mapping) else None
            if ident is not None:
                if ident in self.seen:
                    continue
                self.seen.add(ident)
            line = log_line(record, prefixed=True)
            if line is not None:
                self.out.write(line + "\n")
                self.out.flush()


def wait_until_terminal(client: Client, experiment_id: int) -> dict[str, Any]:
    """Poll the experiment until it is terminal; ride out a master restart."""
    unreachable_since: float | None = None
    while True:
        try:
            experiment: dict[str, Any] = client.get(f"/experiments/{experiment_id}")["experiment"]
            unreachable_since = None
        except (MasterUnreachable, ConnectionLost) as exc:
            now = time.monotonic()
            if unreachable_since is None:
                unreachable_since = now
                render.warn(f"{exc.message}; still trying")
            elif now - unreachable_since > UNREACHABLE_GIVE_UP_SECONDS:
                raise
            time.sleep(max(POLL_SECONDS, 0.05))
            continue
        if render.is_terminal(experiment.get("state")):
            return experiment
        time.sleep(POLL_SECONDS)


def exit_code_for(state: Any) -> int:
    name = render.state(state)
    if name == "COMPLETED":
        return EXIT_COMPLETED
    if name == "CANCELED":
        return EXIT_CANCELED
    return EXIT_ERROR


def _resume_hint(ctx: typer.Context, experiment_id: int) -> str:
    from cli.client import DEFAULT_MASTER

    master = master_url(ctx)
    flag = "" if master == DEFAULT_MASTER else f" -m {master}"
    return (
        f"stopped following; experiment {experiment_id} keeps running. Follow it again with "
        f"`epochal{flag} experiment follow {experiment_id}`, or stop it with "
        f"`epochal{flag} experiment kill {experiment_id}`."
    )


def follow_experiment(ctx: typer.Context, experiment_id: int, as_json: bool) -> int:
    """Stream logs until the experiment is terminal, show the results, return the exit code."""
    master = master_url(ctx)
    pump = _LogPump(master, experiment_id, sys.stderr if as_json else sys.stdout)
    try:
        with Client(master) as client:
            # Fail early (404, unreachable) before starting the log stream.
            client.get(f"/experiments/{experiment_id}")
            pump.start()
            experiment = wait_until_terminal(client, experiment_id)
            pump.join(LOG_DRAIN_SECONDS)
            pump.stop.set()
            if pump.problem:
                render.warn(f"could not stream the logs: {pump.problem}")
            results = gather(client, experiment_id, experiment=experiment)
    except KeyboardInterrupt:
        pump.stop.set()
        sys.stdout.flush()
        sys.stderr.write("\n" + _resume_hint(ctx, experiment_id) + "\n")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    finally:
        pump.stop.set()
    if as_json:
        render.print_json(results.as_json())
    else:
        show_results(results, summary=True)
    return exit_code_for(results.experiment.get("state"))


# -- describe ---------------------------------------------------------------------------------


# An experiment with more trials than this shows its best ones (describe --all: every one), so
# that one of 10,000 trials answers in a screenful.
TRIALS_SHOWN = 20


class Results:
    """An experiment, its trials (all, or the best TRIALS_SHOWN), its best trial (the master's
    pick) and that trial's checkpoints, fetched together."""

    def __init__(
        self,
        experiment: dict[str, Any],
        config: Any,
        trials: list[dict[str, Any]],
        best: dict[str, Any] | None,
        checkpoints: list[dict[str, Any]] | None,
        *,
        every_trial: bool = True,
    ):
        self.experiment = experiment
        self.config = config
        self.trials = trials
        self.best = best
        self.checkpoints = checkpoints
        self.every_trial = every_trial
        self.metric: str | None = experiment.get("searcherMetric")
        self.smaller_is_better = bool(experiment.get("smallerIsBetter", True))

    def best_checkpoint(self) -> str | None:
        if self.best is None:
            return None
        trial_id = self.best.get("id")
        own = [
            c
            for c in self.checkpoints or []
            if render.checkpoint_training(c).get("trialId") == trial_id
            and render.state(c.get("state")) == "COMPLETED"
        ]
        scored = [
            c
            for c in own
            if isinstance(render.checkpoint_training(c).get("searcherMetric"), int | float)
        ]
        if scored:
            pick = min if self.smaller_is_better else max
            return str(pick(scored, key=lambda c: c["training"]["searcherMetric"]).get("uuid"))
        if own:
            return str(max(own, key=lambda c: render.checkpoint_steps(c) or 0).get("uuid"))
        uuid = self.best.get("latestCheckpointUuid")
        return str(uuid) if uuid else None

    def as_json(self) -> dict[str, Any]:
        answer: dict[str, Any] = {"experiment": self.experiment}
        if self.config is not None:
            answer["config"] = self.config
        answer["trials"] = self.trials
        return answer


def gather(client: Client, experiment_id: int, experiment: dict[str, Any] | None = None,
           every_trial: bool = False) -> Results:
    answer = client.get(f"/experiments/{experiment_id}")
    experiment = answer.get("experiment") or experiment or {}
    path = f"/experiments/{experiment_id}/trials"
    total = experiment.get("numTrials")
    every_trial = every_trial or not isinstance(total, int) or total <= TRIALS_SHOWN
    if every_trial:
        trials = client.get_all(path, "trials")["trials"]
    else:  # the best first (nulls last either way)
        order = "ORDER_BY_ASC" if experiment.get("smallerIsBetter", True) else "ORDER_BY_DESC"
        trials = client.get(path, {"limit": TRIALS_SHOWN, "orderBy": order,
                                   "sortBy": "SORT_BY_BEST_VALIDATION_METRIC"}).get("trials") or []
    best_id = experiment.get("bestTrialId")
    best = next((t for t in trials if t.get("id") == best_id), None)
    if best is None and best_id is not None:
        best = client.get(f"/trials/{best_id}").get("trial")
    checkpoints: list[dict[str, Any]] | None = None
    if best is not None:
        try:
            checkpoints = client.get_all(f"/trials/{best_id}/checkpoints", "checkpoints")[
                "checkpoints"]
        except ApiError:
            checkpoints = None  # the best trial's latest checkpoint stands in
    return Results(experiment, answer.get("config"), trials, best, checkpoints,
                   every_trial=every_trial)


def best_line(results: Results) -> str:
    metric = results.metric or "the searcher metric"
    if results.best is None:
        return f"Best trial: none yet (no validation of {metric})"
    best = results.best
    value = render.trial_metric(best, results.metric, "best")
    direction = "smaller" if results.smaller_is_better else "larger"
    text = f"Best trial: {best.get('id')} ({metric}={render.number(value)}, {direction} is better)"
    uuid = results.best_checkpoint()
    text += f", checkpoint {uuid}" if uuid else ", no checkpoint"
    return text


def show_results(results: Results, summary: bool) -> None:
    e = results.experiment
    if summary:
        render.say(
            f"Experiment {e.get('id')} {render.state(e.get('state'))} after "
            f"{render.duration(e.get('startTime'), e.get('endTime'))}"
        )
    best_id = results.best.get("id") if results.best else None
    table = render.trials_table(results.trials, results.metric, best_id,
                                by_id=results.every_trial)
    render.show(table)
    if not results.every_trial:
        render.say(f"The {len(results.trials)} best of {e.get('numTrials')} trials by "
                   f"{results.metric}; `--all` lists every trial.")
    render.say(best_line(results))


def _labels(value: Any) -> str:
    if isinstance(value, list) and value:
        return ", ".join(str(v) for v in value)
    return "-"


def _trial_count(e: Mapping[str, Any]) -> str:
    """`10000 (9990 COMPLETED, 10 ERROR)`: the count, then how many are in each state."""
    total = render.number(e.get("numTrials"))
    states = e.get("trialStates")
    if not isinstance(states, Mapping) or not states:
        return total
    return total + " (" + ", ".join(
        f"{n} {render.state(state)}" for state, n in sorted(
            states.items(), key=lambda item: (-item[1], item[0]))) + ")"


def experiment_fields(e: Mapping[str, Any]) -> list[tuple[str, Any]]:
    metric = e.get("searcherMetric")
    direction = "smaller" if e.get("smallerIsBetter", True) else "larger"
    rows: list[tuple[str, Any]] = [
        ("ID", e.get("id")),
        ("Name", e.get("name") or "-"),
        ("State", render.state(e.get("state"))),
    ]
    if e.get("description"):
        rows.append(("Description", e.get("description")))
    rows += [
        ("Labels", _labels(e.get("labels"))),
        ("Searcher", e.get("searcherType") or "-"),
        ("Metric", f"{metric} ({direction} is better)" if metric else "-"),
        ("Progress", render.percent(e.get("progress"))),
        ("Trials", _trial_count(e)),
        ("Started", render.when(e.get("startTime"))),
        ("Ended", render.when(e.get("endTime"))),
        ("Duration", render.duration(e.get("startTime"), e.get("endTime"))),
        ("Resource pool", e.get("resourcePool") or "-"),
        ("User", e.get("username") or "-"),
    ]
    if e.get("archived"):
        rows.append(("Archived", "yes"))
    return rows


# -- commands ---------------------------------------------------------------------------------


@app.command(
    "create",
    help=(
        "Validate CONFIG, package MODEL_DIR and submit them as a new experiment.\n\n"
        "The config is checked locally first: every error is listed and the exit code is 2 "
        "(also when MODEL_DIR lacks the entrypoint's script, is over 96 MiB, or has unreadable "
        "files); nothing is submitted then. Files matching the gitignore-style patterns in "
        "MODEL_DIR/.epochalignore are left out (caches and VCS folders always are).\n\n"
        + FOLLOW_EXIT_CODES
    ),
)
def create(
    ctx: typer.Context,
    config: Annotated[
        Path, typer.Argument(metavar="CONFIG", help="Experiment config (YAML).", show_default=False)
    ],
    model_def: Annotated[
        Path, typer.Argument(metavar="MODEL_DIR", help="Directory of training code.")
    ],
    follow: Annotated[
        bool,
        typer.Option(
            "--follow", "-f", help="Stream the logs until the experiment ends, then show results."
        ),
    ] = False,
    as_json: JsonOpt = False,
    template: Annotated[
        str | None,
        typer.Option("--template", help="Config template merged under CONFIG (the config wins)."),
    ] = None,
    project_id: Annotated[
        int | None,
        typer.Option("--project", help="Project id to put the experiment in (default: the "
                                       "config's workspace/project, else 1)."),
    ] = None,
) -> None:
    text, parsed = load_config(config, partial=template is not None)
    model_dir.require_dir(model_def)
    script = check_entrypoint(config, getattr(parsed, "entrypoint", None), model_def)
    files = model_dir.package(model_def)
    if script is not None and not any(f["path"] == script for f in files):
        raise CliError(
            f"the entrypoint of {config} runs {script}, but {model_def}/{model_dir.IGNORE_FILE} "
            "leaves it out",
            exit_code=2,
        )
    body = {"config": text, "modelDefinition": files, "activate": True, "template": template,
            "projectId": project_id}
    from cli.client import UPLOAD_TIMEOUT

    with Client(master_url(ctx)) as client:
        answer = client.post("/experiments", body, timeout=UPLOAD_TIMEOUT)
    experiment = answer.get("experiment") or {}
    experiment_id = experiment.get("id")
    if as_json and not follow:
        render.print_json(answer)
        return
    for warning in [*(answer.get("configWarnings") or []), *(answer.get("warnings") or [])]:
        render.warn(str(warning))
    if experiment_id is None:
        raise CliError("the master created the experiment but did not say its id")
    if not as_json:
        render.say(f"Created experiment {experiment_id}")
    else:
        sys.stderr.write(f"Created experiment {experiment_id}\n")
    if follow:
        raise typer.Exit(follow_experiment(ctx, int(experiment_id), as_json))


@app.command(
    "follow",
    help=(
        "Stream an experiment's logs until it ends, then show its trials and best checkpoint. "
        "Ctrl-C stops following, not the experiment.\n\n" + FOLLOW_EXIT_CODES
    ),
)
def follow_command(ctx: typer.Context, experiment_id: IdArg, as_json: JsonOpt = False) -> None:
    raise typer.Exit(follow_experiment(ctx, experiment_id, as_json))


@app.command("list", help="List experiments (archived ones only with --all).")
def list_experiments(
    ctx: typer.Context,
    show_all: Annotated[
        bool, typer.Option("--all", "-a", help="Include archived experiments.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    with Client(master_url(ctx)) as client:
        params = {"orderBy": "ORDER_BY_ASC"}
        if not show_all:  # Determined's filter: archived=true would list only archived ones
            params["archived"] = "false"
        answer = client.get_all("/experiments", "experiments", params)
    experiments = answer["experiments"]
    if not show_all:
        experiments = [e for e in experiments if not e.get("archived")]
        answer["experiments"] = experiments
        answer["pagination"]["total"] = answer["pagination"]["limit"] = len(experiments)
    if as_json:
        render.print_json(answer)
        return
    if not experiments:
        render.say("No experiments yet. Create one with `epochal experiment create CONFIG DIR`.")
        return

    def best_of(e: Mapping[str, Any]) -> Any:
        best = e.get("bestValidation")
        if isinstance(best, Mapping):
            best = render.metric_value(best, e.get("searcherMetric"))
        return best

    # The list answer may leave the best value out; show the column only when it has one.
    with_best = any(best_of(e) is not None for e in experiments)
    columns = ["ID", "Name", "State", "Searcher", "Progress", "Trials"]
    columns += ["Best"] if with_best else []
    columns += ["Started", "Ended"] + (["Archived"] if show_all else [])
    t = render.table(*columns, wrap=["Name"])
    for e in sorted(experiments, key=lambda x: x.get("id") or 0):
        row = [
            str(e.get("id")),
            str(e.get("name") or "-"),
            render.state(e.get("state")),
            str(e.get("searcherType") or "-"),
            render.percent(e.get("progress")),
            render.number(e.get("numTrials")),
        ]
        row += [render.number(best_of(e))] if with_best else []
        row += [render.when(e.get("startTime"), True), render.when(e.get("endTime"), True)]
        if show_all:
            row.append("yes" if e.get("archived") else "")
        t.add_row(*row)
    render.show(t)


@app.command("describe", help=(
    "Show an experiment, its trials and its best trial's checkpoint. An experiment of more than "
    f"{TRIALS_SHOWN} trials shows its {TRIALS_SHOWN} best (by the searcher metric) and how many "
    "trials are in each state; --all lists every trial."))
def describe(
    ctx: typer.Context,
    experiment_id: IdArg,
    as_json: JsonOpt = False,
    every_trial: Annotated[bool, typer.Option("--all", help="List every trial.")] = False,
) -> None:
    with Client(master_url(ctx)) as client:
        results = gather(client, experiment_id, every_trial=every_trial)
    if as_json:
        render.print_json(results.as_json())
        return
    render.show(render.fields(experiment_fields(results.experiment)))
    render.say()
    show_results(results, summary=False)


@app.command("logs", help="Print the logs of every trial of an experiment.")
def logs(
    ctx: typer.Context,
    experiment_id: IdArg,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep streaming until the experiment ends.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print each TrialLog as JSON.")] = False,
) -> None:
    with Client(master_url(ctx)) as client:
        print_logs(client, f"/experiments/{experiment_id}/logs", follow, True, as_json)


def _action(ctx: typer.Context, experiment_id: int, verb: str, done: str) -> None:
    with Client(master_url(ctx)) as client:
        client.post(f"/experiments/{experiment_id}/{verb}")
    render.say(f"{done} experiment {experiment_id}")


@app.command("pause", help="Pause an experiment: its trials stop after their next checkpoint.")
def pause(ctx: typer.Context, experiment_id: IdArg) -> None:
    _action(ctx, experiment_id, "pause", "Paused")


@app.command("activate", help="Activate (resume) a paused experiment.")
def activate(ctx: typer.Context, experiment_id: IdArg) -> None:
    _action(ctx, experiment_id, "activate", "Activated")


@app.command("cancel", help="Cancel an experiment: its trials checkpoint, then stop.")
def cancel(ctx: typer.Context, experiment_id: IdArg) -> None:
    _action(ctx, experiment_id, "cancel", "Canceling")


@app.command("kill", help="Kill an experiment: its trials stop at once.")
def kill(ctx: typer.Context, experiment_id: IdArg) -> None:
    _action(ctx, experiment_id, "kill", "Killing")


set_app = typer.Typer(help="Change an experiment's scheduling: priority, max slots, weight.",
                      no_args_is_help=True)
app.add_typer(set_app, name="set")


def _set_resources(ctx: typer.Context, experiment_id: int, field: str, value: Any) -> None:
    with Client(master_url(ctx)) as client:
        client.request("PATCH", f"/experiments/{experiment_id}",
                       json={"id": experiment_id, "resources": {field: value}})
    render.say(f"Set {field} of experiment {experiment_id} to {value}")


@set_app.command("priority", help="Lower numbers run first (1 to 99; default 42).")
def set_priority(
    ctx: typer.Context, experiment_id: IdArg,
    priority: Annotated[int, typer.Argument(min=1, max=99, show_default=False)],
) -> None:
    _set_resources(ctx, experiment_id, "priority", priority)


@set_app.command("max-slots", help="The most slots the experiment's trials hold at once.")
def set_max_slots(
    ctx: typer.Context, experiment_id: IdArg,
    max_slots: Annotated[int, typer.Argument(min=0, show_default=False)],
) -> None:
    _set_resources(ctx, experiment_id, "maxSlots", max_slots)


@set_app.command("weight", help="Its share among experiments of equal priority (default 1).")
def set_weight(
    ctx: typer.Context, experiment_id: IdArg,
    weight: Annotated[float, typer.Argument(min=0.001, show_default=False)],
) -> None:
    _set_resources(ctx, experiment_id, "weight", weight)


@app.command("fork", help="Create a new experiment from another's model definition, with "
                          "CONFIG (default: the other's config).")
def fork(
    ctx: typer.Context,
    experiment_id: IdArg,
    config_file: Annotated[
        Path | None,
        typer.Option("--config-file", "-c", help="Config of the new experiment (YAML)."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    with Client(master_url(ctx)) as client:
        if config_file is not None:
            text, _ = load_config(config_file)
        else:
            import yaml

            # The config it ran with (templates merged, defaults filled in), not its original.
            text = yaml.safe_dump(client.get(f"/experiments/{experiment_id}")["config"],
                                  sort_keys=False)
        answer = client.post("/experiments", {"config": text, "parentId": experiment_id})
    if as_json:
        render.print_json(answer)
        return
    for warning in answer.get("configWarnings") or []:
        render.warn(str(warning))
    render.say(f"Created experiment {answer['experiment']['id']} (forked from {experiment_id})")
