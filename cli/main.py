"""The `epochal` command's client half: experiments, trials, checkpoints, agents, users, models,
tasks and the cluster's usage, through a master's REST API. The installed `epochal` adds the
commands that run a cluster (`cluster`, `master run`: deploy/console.py), which only deploy may
compose.

Every expected failure is a `cli.client.CliError`, turned into `error: ...` on stderr and its exit
code by `_Root.invoke`, the one error handler. Heavy modules (temporalio, deploy, the config
model) are imported inside the commands that need them so `epochal --help` stays fast.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from cli import (
    agent,
    checkpoint,
    experiment,
    history_import,
    image,
    model,
    ntsc,
    render,
    resources,
    scheduling,
    trial,
    user,
    workspace,
)
from cli.client import CliError, resolve_master
from common import tracing


class _Root(TyperGroup):
    """The root group: runs every command inside the one handler of expected errors."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except CliError as exc:
            sys.stdout.flush()
            render.sentence(f"error: {exc.message}", exc.details)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            sys.stderr.write("\ninterrupted\n")
            raise typer.Exit(130) from None
        except BrokenPipeError:
            # `epochal experiment logs 1 | head`: the reader left; that is not an error.
            raise typer.Exit(0) from None


app = typer.Typer(
    name="epochal",
    cls=_Root,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    help=(
        "Epochal: train deep-learning models on a cluster. Experiments, hyperparameter "
        "search and checkpoints; the master runs on Temporal workflows.\n\n"
        "Exit codes: 0 success, 1 error (an `error: ...` line says why), 2 bad usage or "
        "invalid input found before anything was sent."
    ),
)


@app.callback()
def root(
    ctx: typer.Context,
    master: Annotated[
        str | None,
        typer.Option(
            "-m",
            "--master",
            help="Master URL (default: env EPOCHAL_MASTER, else http://127.0.0.1:8080).",
            show_default=False,
        ),
    ] = None,
) -> None:
    ctx.obj = {"master": resolve_master(master)}
    if tracing.wanted() and tracing.setup("epochal-cli"):
        # One span per command: its requests' spans on the master join its trace.
        words = [w for w in sys.argv[1:] if not w.startswith("-")][:2]
        ctx.with_resource(tracing.span(" ".join(["epochal", *words])))


app.add_typer(experiment.app, name="experiment")
app.add_typer(trial.app, name="trial")
app.add_typer(checkpoint.app, name="checkpoint")
app.add_typer(agent.app, name="agent")
app.add_typer(scheduling.slot_app, name="slot")
app.add_typer(scheduling.job_app, name="job")
app.add_typer(resources.app, name="resources")
app.add_typer(image.app, name="image")
app.add_typer(user.app, name="user")
app.add_typer(workspace.workspace_app, name="workspace")
app.add_typer(workspace.project_app, name="project")
app.add_typer(workspace.template_app, name="template")
app.add_typer(model.app, name="model")
app.add_typer(history_import.app, name="import")
ntsc.register(app)  # cmd, notebook, shell, tensorboard

if __name__ == "__main__":  # pragma: no cover
    app()
