"""`epochal trial ...`: describe and logs."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli import render
from cli.client import ApiError, Client, master_url
from cli.experiment_follow import print_logs

app = typer.Typer(help="Inspect trials.", no_args_is_help=True)

IdArg = Annotated[int, typer.Argument(help="Trial id.", metavar="ID", show_default=False)]


def _validation_text(report: Any) -> str:
    if not isinstance(report, dict):
        return "-"
    values = render.metrics_of(report)
    shown = ", ".join(f"{k}={render.number(v)}" for k, v in values.items()) or "no metrics"
    return f"step {render.number(report.get('stepsCompleted'))}: {shown}"


def trial_fields(trial: dict[str, Any], metric: str | None) -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = [
        ("ID", trial.get("id")),
        ("Experiment", trial.get("experimentId")),
        ("State", render.state(trial.get("state"))),
        ("Steps", trial.get("totalBatchesProcessed")),
        ("Progress", render.percent(trial.get("progress"))),
        ("Restarts", trial.get("restarts")),
        ("Run", trial.get("runId")),
        ("Agent", trial.get("agentId") or "-"),
        ("Task", trial.get("taskId") or "-"),
        ("Started", render.when(trial.get("startTime"))),
        ("Ended", render.when(trial.get("endTime"))),
        ("Duration", render.duration(trial.get("startTime"), trial.get("endTime"))),
    ]
    if trial.get("earlyExitReason"):
        rows.append(("Early exit", str(trial["earlyExitReason"])))
    hparams = render.flatten(trial.get("hparams") or {})
    # One `name=value` a line (fields() shows a list so), each line escaped on its own.
    rows.append(("Hyperparameters",
                 [f"{k}={render.hp_value(v)}" for k, v in sorted(hparams.items())]))
    if metric:
        rows.append(("Searcher metric", metric))
        rows.append(("Latest value", render.trial_metric(trial, metric, "latest")))
        rows.append(("Best value", render.trial_metric(trial, metric, "best")))
    rows.append(("Latest validation", _validation_text(trial.get("latestValidation"))))
    rows.append(("Best validation", _validation_text(trial.get("bestValidation"))))
    rows.append(("Latest checkpoint", trial.get("latestCheckpointUuid") or "-"))
    return rows


SYSTEM_ROWS = 20  # samples `describe --system` shows, spread over the run


@app.command("describe", help="Show a trial: state, hyperparameters, metrics, checkpoints.")
def describe(
    ctx: typer.Context,
    trial_id: IdArg,
    as_json: Annotated[bool, typer.Option("--json", help="Print the server's JSON.")] = False,
    system: Annotated[bool, typer.Option(
        "--system", help="Also show the agent's system metrics of the trial (CPU, memory, "
        "disk, network, GPUs), sampled when its config says `profiling: {enabled: true}`.")]
    = False,
) -> None:
    with Client(master_url(ctx)) as client:
        trial = client.get(f"/trials/{trial_id}")["trial"]
        checkpoints = client.get(f"/trials/{trial_id}/checkpoints").get("checkpoints") or []
        samples = client.get(f"/trials/{trial_id}/metrics", {
            "group": "system", "maxDatapoints": SYSTEM_ROWS})["metrics"] if system else None
        metric: str | None = None
        experiment_id = trial.get("experimentId")
        if experiment_id is not None and not as_json:
            try:
                experiment = client.get(f"/experiments/{experiment_id}")["experiment"]
                metric = experiment.get("searcherMetric")
            except ApiError:
                metric = None
    if as_json:
        render.print_json({"trial": trial, "checkpoints": checkpoints,
                           **({"system": samples} if samples is not None else {})})
        return
    render.show(render.fields(trial_fields(trial, metric)))
    render.say()
    kept, deleted = render.without_deleted(checkpoints)
    if kept:
        render.show(render.checkpoints_table(kept, metric, with_trial=False))
    else:
        render.say("No checkpoints.")
    if deleted:
        render.say(f"{deleted} deleted checkpoint{'s' if deleted != 1 else ''} not shown "
                   "(`--json` lists them).")
    if samples is not None:
        render.say()
        if samples:
            render.show(render.system_metrics_table(samples))
        else:
            render.say("No system metrics: the agent samples them when the experiment's config "
                       "says `profiling: {enabled: true}`.")


@app.command("logs", help="Print a trial's logs.")
def logs(
    ctx: typer.Context,
    trial_id: IdArg,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep streaming until the trial ends.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print each TrialLog as JSON.")] = False,
) -> None:
    with Client(master_url(ctx)) as client:
        print_logs(client, f"/trials/{trial_id}/logs", follow, False, as_json)
