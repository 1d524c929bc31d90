"""The installed `epochal` command: the CLI's client commands (cli/) and the two that run a
cluster on this machine, `cluster` (the embedded local cluster) and `master run` (the master in
this process). They live here because only deploy composes the parts."""

from __future__ import annotations

import typer

from cli.main import app
from deploy import cluster_commands

app.add_typer(cluster_commands.app, name="cluster")

master_app = typer.Typer(help="Run the master.", no_args_is_help=True)
app.add_typer(master_app, name="master")


@master_app.command(
    "run",
    help=(
        "Run the master in this process: database migrations, the REST API and the Temporal "
        "worker. Configured by env EPOCHAL_DB_URL, EPOCHAL_TEMPORAL_ADDRESS, "
        "EPOCHAL_API_HOST, EPOCHAL_API_PORT (see docs/CONTRACTS.md)."
    ),
)
def master_run() -> None:
    from deploy.master import main

    main()


if __name__ == "__main__":  # pragma: no cover
    app()
