"""`epochal checkpoint ...`: list an experiment's checkpoints."""

from __future__ import annotations

from typing import Annotated

import typer

from cli import render
from cli.client import ApiError, Client, master_url

app = typer.Typer(help="Inspect checkpoints.", no_args_is_help=True)


@app.command("list", help="List the checkpoints of an experiment's trials.")
def list_checkpoints(
    ctx: typer.Context,
    experiment_id: Annotated[
        int, typer.Argument(metavar="EXPERIMENT_ID", help="Experiment id.", show_default=False)
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print the server's JSON.")] = False,
) -> None:
    with Client(master_url(ctx)) as client:
        answer = client.get_all(f"/experiments/{experiment_id}/checkpoints", "checkpoints")
        metric = None
        if not as_json:
            try:
                experiment = client.get(f"/experiments/{experiment_id}")["experiment"]
                metric = experiment.get("searcherMetric")
            except ApiError:
                metric = None
    if as_json:
        render.print_json(answer)
        return
    checkpoints = answer["checkpoints"]
    if not checkpoints:
        render.say(f"Experiment {experiment_id} has no checkpoints yet.")
        return
    render.show(render.checkpoints_table(checkpoints, metric))
