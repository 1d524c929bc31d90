"""Following an experiment: its logs streamed while its state is watched, until it ends; the
exit code says how it ended."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Mapping
from typing import Any, TextIO

import typer

from cli import render
from cli.client import (
    Client,
    CliError,
    ConnectionLost,
    MasterUnreachable,
    master_url,
)
from cli.experiment_results import gather, show_results
from common.states import ExperimentState

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
    if name == ExperimentState.COMPLETED:
        return EXIT_COMPLETED
    if name == ExperimentState.CANCELED:
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


