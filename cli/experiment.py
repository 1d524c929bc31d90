"""`epochal experiment ...`: create, follow, list, describe, logs, pause/activate/cancel/kill,
set, label, archive/unarchive, delete, config, download-model-def, fork, continue. The commands
only: what they check before submitting is in experiment_config.py, following in
experiment_follow.py, results in experiment_results.py."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from cli import model_dir, render
from cli.client import Client, CliError, master_url
from cli.experiment_config import check_entrypoint, load_config
from cli.experiment_follow import FOLLOW_EXIT_CODES, follow_experiment, print_logs
from cli.experiment_results import TRIALS_SHOWN, experiment_fields, gather, show_results

app = typer.Typer(help="Create, watch and control experiments.", no_args_is_help=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print the server's JSON.")]
IdArg = Annotated[int, typer.Argument(help="Experiment id.", metavar="ID", show_default=False)]
FollowOpt = Annotated[bool, typer.Option(
    "--follow", "-f", help="Stream the logs until the experiment ends, then show results.")]


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
    follow: FollowOpt = False,
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
    t = render.table(*columns, shrink=["Name", "Searcher", "Started", "Ended"])
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


# The commands that post one verb to the experiment: (verb, what is said after, help).
ACTIONS = (
    ("pause", "Paused", "Pause an experiment: its trials stop after their next checkpoint."),
    ("activate", "Activated", "Activate (resume) a paused experiment."),
    ("cancel", "Canceling", "Cancel an experiment: its trials checkpoint, then stop."),
    ("kill", "Killing", "Kill an experiment: its trials stop at once."),
    ("archive", "Archived", "Archive an ended experiment: `list` leaves it out (--all shows it)."),
    ("unarchive", "Unarchived", "Unarchive an experiment."),
)


def _said(answer: Any, what: dict[str, Any]) -> Any:
    """The server's answer for --json, or `what` was done when it answered nothing."""
    return answer if isinstance(answer, dict) and answer else what


def _action_command(verb: str, done: str, help_text: str) -> None:
    def command(ctx: typer.Context, experiment_id: IdArg, as_json: JsonOpt = False) -> None:
        with Client(master_url(ctx)) as client:
            answer = client.post(f"/experiments/{experiment_id}/{verb}")
        render.done(as_json, _said(answer, {"id": experiment_id, "action": verb}),
                    f"{done} experiment {experiment_id}")

    command.__name__ = verb
    app.command(verb, help=help_text)(command)


for _verb, _done, _help in ACTIONS:
    _action_command(_verb, _done, _help)


set_app = typer.Typer(help="Change an experiment's name, description, notes or scheduling ("
                           "priority, max slots, weight).", no_args_is_help=True)
app.add_typer(set_app, name="set")
label_app = typer.Typer(help="Add labels to an experiment or remove them.", no_args_is_help=True)
app.add_typer(label_app, name="label")


def _set_resources(ctx: typer.Context, experiment_id: int, field: str, value: Any,
                   as_json: bool) -> None:
    with Client(master_url(ctx)) as client:
        answer = client.request("PATCH", f"/experiments/{experiment_id}",
                                json={"id": experiment_id, "resources": {field: value}})
    render.done(as_json, _said(answer, {"id": experiment_id, field: value}),
                f"Set {field} of experiment {experiment_id} to {value}")


@set_app.command("priority", help="Lower numbers run first (1 to 99; default 42).")
def set_priority(
    ctx: typer.Context, experiment_id: IdArg,
    priority: Annotated[int, typer.Argument(min=1, max=99, show_default=False)],
    as_json: JsonOpt = False,
) -> None:
    _set_resources(ctx, experiment_id, "priority", priority, as_json)


@set_app.command("max-slots", help="The most slots the experiment's trials hold at once.")
def set_max_slots(
    ctx: typer.Context, experiment_id: IdArg,
    max_slots: Annotated[int, typer.Argument(min=0, show_default=False)],
    as_json: JsonOpt = False,
) -> None:
    _set_resources(ctx, experiment_id, "maxSlots", max_slots, as_json)


@set_app.command("weight", help="Its share among experiments of equal priority (default 1).")
def set_weight(
    ctx: typer.Context, experiment_id: IdArg,
    weight: Annotated[float, typer.Argument(min=0.001, show_default=False)],
    as_json: JsonOpt = False,
) -> None:
    _set_resources(ctx, experiment_id, "weight", weight, as_json)


def _patch(ctx: typer.Context, experiment_id: int, change: dict[str, Any]) -> dict[str, Any]:
    with Client(master_url(ctx)) as client:
        answer = client.request("PATCH", f"/experiments/{experiment_id}",
                                json={"id": experiment_id, **change})
    return dict(answer.get("experiment") or {}) if isinstance(answer, dict) else {}


@set_app.command("name", help="Rename an experiment.")
def set_name(
    ctx: typer.Context, experiment_id: IdArg,
    name: Annotated[str, typer.Argument(show_default=False)],
    as_json: JsonOpt = False,
) -> None:
    answer = _patch(ctx, experiment_id, {"name": name})
    render.done(as_json, {"experiment": answer},
                f"Renamed experiment {experiment_id} to {render.printable(name)}")


@set_app.command("description", help="Set an experiment's description (\"\" clears it).")
def set_description(
    ctx: typer.Context, experiment_id: IdArg,
    description: Annotated[str, typer.Argument(show_default=False)],
    as_json: JsonOpt = False,
) -> None:
    answer = _patch(ctx, experiment_id, {"description": description})
    render.done(as_json, {"experiment": answer},
                f"Set the description of experiment {experiment_id}")


@set_app.command("notes", help="Set an experiment's notes (TEXT, or - to read them from "
                               "standard input; \"\" clears them).")
def set_notes(
    ctx: typer.Context, experiment_id: IdArg,
    text: Annotated[str, typer.Argument(metavar="TEXT", show_default=False)],
    as_json: JsonOpt = False,
) -> None:
    answer = _patch(ctx, experiment_id, {"notes": sys.stdin.read() if text == "-" else text})
    render.done(as_json, {"experiment": answer}, f"Set the notes of experiment {experiment_id}")


def _change_labels(ctx: typer.Context, experiment_id: int, labels: list[str], add: bool,
                   as_json: bool) -> None:
    with Client(master_url(ctx)) as client:
        current = set(client.get(f"/experiments/{experiment_id}")["experiment"].get("labels")
                      or [])
    wanted = current | set(labels) if add else current - set(labels)
    shown = _patch(ctx, experiment_id, {"labels": sorted(wanted)}).get("labels", sorted(wanted))
    render.done(as_json, {"id": experiment_id, "labels": shown},
                f"Labels of experiment {experiment_id}: "
                + (", ".join(render.printable(str(label)) for label in shown) or "none"))


LabelsArg = Annotated[list[str], typer.Argument(metavar="LABEL...", show_default=False)]


@label_app.command("add", help="Add labels to an experiment.")
def add_labels(ctx: typer.Context, experiment_id: IdArg, labels: LabelsArg,
               as_json: JsonOpt = False) -> None:
    _change_labels(ctx, experiment_id, labels, add=True, as_json=as_json)


@label_app.command("remove", help="Remove labels from an experiment.")
def remove_labels(ctx: typer.Context, experiment_id: IdArg, labels: LabelsArg,
                  as_json: JsonOpt = False) -> None:
    _change_labels(ctx, experiment_id, labels, add=False, as_json=as_json)


@app.command("delete", help="Delete an ended experiment: its trials, metrics, logs and the "
                            "checkpoint files no model version holds. Asks first, unless --yes.")
def delete(
    ctx: typer.Context,
    experiment_id: IdArg,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    as_json: JsonOpt = False,
) -> None:
    if not yes and not typer.confirm(
            f"Delete experiment {experiment_id} and its checkpoints for good?", default=False,
            err=as_json):  # with --json, stdout is for the JSON alone
        raise CliError("not deleted")
    with Client(master_url(ctx)) as client:
        answer = client.request("DELETE", f"/experiments/{experiment_id}")
    render.done(as_json, _said(answer, {"id": experiment_id, "deleted": True}),
                f"Deleted experiment {experiment_id}")


@app.command("config", help="Print an experiment's config as YAML: as submitted, or with "
                            "--normalized as it runs (templates merged, defaults filled in).")
def show_config(
    ctx: typer.Context,
    experiment_id: IdArg,
    normalized: Annotated[bool, typer.Option("--normalized", help="The config it runs with.")]
    = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the config as JSON: "
                                          "{\"originalConfig\": YAML text}, or with "
                                          "--normalized {\"config\": ...}.")] = False,
) -> None:
    with Client(master_url(ctx)) as client:
        answer = client.get(f"/experiments/{experiment_id}")
    if as_json:
        render.print_json({"config": answer.get("config") or {}} if normalized else
                          {"originalConfig": answer["experiment"].get("originalConfig")})
        return
    if normalized:
        import yaml

        text = yaml.safe_dump(answer.get("config") or {}, sort_keys=False)
    else:
        text = str(answer["experiment"].get("originalConfig") or "")
    sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")


@app.command("download-model-def", help="Unpack an experiment's model definition (the files "
                                          "it was submitted with) into DIR.")
def download_model_def(
    ctx: typer.Context,
    experiment_id: IdArg,
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="Where to put the files "
                                              "(made if missing).", show_default=False)],
    as_json: JsonOpt = False,
) -> None:
    import base64
    import io
    import tarfile

    with Client(master_url(ctx)) as client:
        tgz = base64.b64decode(client.get(f"/experiments/{experiment_id}/model_def")["b64Tgz"])
    directory.mkdir(parents=True, exist_ok=True)
    count = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as archive:
            for member in archive:
                # `data`: nothing outside DIR, no links, devices or set-uid bits.
                archive.extract(member, directory, filter="data")
                count += member.isfile()
    except tarfile.TarError as err:
        raise CliError(f"the model definition of experiment {experiment_id}: {err}") from None
    render.done(as_json, {"id": experiment_id, "directory": str(directory), "files": count},
                f"Unpacked the model definition of experiment {experiment_id} into {directory} "
                f"({count} files)")


def _config_file(help_text: str) -> Any:
    return typer.Option("--config-file", "-c", help=help_text)


@app.command("fork", help="Create a new experiment from another's model definition, with "
                          "CONFIG (default: the other's config).")
def fork(
    ctx: typer.Context,
    experiment_id: IdArg,
    config_file: Annotated[Path | None,
                           _config_file("Config of the new experiment (YAML).")] = None,
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


@app.command("continue", help=(
    "Train an ended single-trial experiment's trial on from its latest checkpoint, under the "
    "same experiment and trial ids, with --config-file's fields (e.g. a longer "
    "`searcher.max_length`) merged over its config; as Determined's `det experiment continue`."
    "\n\n" + FOLLOW_EXIT_CODES))
def continue_command(
    ctx: typer.Context,
    experiment_id: IdArg,
    follow: FollowOpt = False,
    config_file: Annotated[Path | None,
                           _config_file("Fields to change (YAML, a partial config).")] = None,
    as_json: JsonOpt = False,
) -> None:
    override = load_config(config_file, partial=True)[0] if config_file is not None else None
    with Client(master_url(ctx)) as client:
        answer = client.post("/experiments/continue",
                             {"id": experiment_id, "overrideConfig": override})
    if as_json and not follow:
        render.print_json(answer)
        return
    (sys.stderr if as_json else sys.stdout).write(f"Continued experiment {experiment_id}\n")
    if follow:
        raise typer.Exit(follow_experiment(ctx, experiment_id, as_json))
