"""`epochal cmd|notebook|shell|tensorboard ...`: interactive tasks on the cluster's slots, the
verbs of Determined's `det` (commands, JupyterLab, SSH shells, TensorBoards).

A task is launched with a config (`--config-file`, `--config key=value` overrides, as `det`
reads them) and its files (`--context DIR`, `--include PATH`); the master schedules it like a
trial. Notebooks and TensorBoards are reached through the master's proxy at
`<master>/proxy/<id>/`, shells with ssh tunnelled through it (`python -m cli.tunnel`).
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from cli import model_dir, render
from cli.client import UPLOAD_TIMEOUT, Client, CliError, master_url
from cli.experiment_config import config_mapping, read_config_text
from common.temporal_names import is_task_uuid

# How long `start` waits for a notebook, shell or TensorBoard to answer (Determined's: 30 min).
READY_TIMEOUT_SECONDS = 30 * 60.0
READY_POLL_SECONDS = 1.0
EXIT_ENDED_OTHERWISE = 1  # `cmd run`: the command was killed or failed to start


@dataclass(frozen=True)
class Kind:
    path: str  # the API's: /api/v1/<path>
    key: str  # the answers' key, and what messages call it


COMMAND = Kind("commands", "command")
NOTEBOOK = Kind("notebooks", "notebook")
SHELL = Kind("shells", "shell")
TENSORBOARD = Kind("tensorboards", "tensorboard")

cmd_app = typer.Typer(help="Run commands on the cluster's slots.", no_args_is_help=True)
notebook_app = typer.Typer(help="JupyterLab on the cluster's slots, through the master.",
                           no_args_is_help=True)
shell_app = typer.Typer(help="SSH shells on the cluster's slots, through the master.",
                        no_args_is_help=True)
tensorboard_app = typer.Typer(help="TensorBoards of experiments' metrics, through the master.",
                              no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(cmd_app, name="cmd")
    app.add_typer(notebook_app, name="notebook")
    app.add_typer(shell_app, name="shell")
    app.add_typer(tensorboard_app, name="tensorboard")


AsJson = Annotated[bool, typer.Option("--json", help="Print the server's JSON.")]
LaunchJson = Annotated[bool, typer.Option("--json", help="Print the master's answer to the "
                                          "launch (the task, with its id) and return, as "
                                          "--detach does.")]
ShowAll = Annotated[bool, typer.Option("--all", "-a", help="Every user's, not only yours.")]
Detach = Annotated[bool, typer.Option("--detach", "-d", help="Print the id and return.")]
TaskId = Annotated[str, typer.Argument(metavar="ID", help="Its id (or a unique prefix).",
                                       show_default=False)]
ConfigFile = Annotated[Path | None, typer.Option(
    "--config-file", help="The task's config (YAML), as `det` takes it.")]
Overrides = Annotated[list[str] | None, typer.Option(
    "--config", help="key=value over the config (`resources.slots=2`); repeatable.")]
ContextDir = Annotated[Path | None, typer.Option(
    "--context", "-c", help="A directory whose files the task starts in (96 MiB at most).")]
Includes = Annotated[list[Path] | None, typer.Option(
    "--include", "-i", help="A file or directory copied in under its own name; repeatable.")]
Template = Annotated[str | None, typer.Option(
    "--template", help="A config template merged under the config (the config wins).")]
WorkspaceId = Annotated[int | None, typer.Option(
    "--workspace-id", help="The workspace to file it in (default: Uncategorized).")]


# -- launching -------------------------------------------------------------------------------

def _set(config: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node = config
    for name in parents:
        if not isinstance(node.get(name), dict):
            node[name] = {}
        node = node[name]
    node[last] = value


def _override_value(key: str, text: str) -> Any:
    """A `--config` value as `det` reads it: YAML, a comma-separated list, and `bind_mounts`
    always a list."""
    from common.expconf import ConfigError, load_config_yaml

    try:
        if text.startswith(("[", "{")) or "," not in text:
            value = load_config_yaml(text, source=f"--config {key}")
        else:
            value = [load_config_yaml(part, source=f"--config {key}") for part in text.split(",")]
    except ConfigError as err:
        raise CliError(f"bad --config {key}", err.errors, exit_code=2) from None
    if key == "bind_mounts" and not isinstance(value, list):
        value = [value]
    return value


def read_config(config_file: Path | None, overrides: list[str] | None) -> dict[str, Any]:
    """The config file (YAML) with the `--config key=value` overrides over it."""
    config: dict[str, Any] = {}
    if config_file is not None:
        config = config_mapping(read_config_text(config_file, "config"), config_file, "config")
    for override in overrides or []:
        key, sep, text = override.partition("=")
        if not sep or not key:
            raise CliError(f"bad --config {override!r}: expected key=value, e.g. "
                           "resources.slots=2", exit_code=2)
        _set(config, key, _override_value(key, text))
    return config


def _included_file(path: Path) -> dict[str, Any]:
    info = path.stat()
    return {"path": path.resolve().name, "type": model_dir.REGULAR_FILE,
            "content": base64.b64encode(path.read_bytes()).decode("ascii"),
            "mode": info.st_mode & 0o777, "mtime": int(info.st_mtime), "uid": 0, "gid": 0}


def _files(context: Path | None, includes: list[Path] | None) -> list[dict[str, Any]]:
    """The task's files as Determined's list of File objects: the context directory's at the
    top, each include under its own name."""
    files: list[dict[str, Any]] = []
    if context is not None:
        files += model_dir.package(context)
    for include in includes or []:
        if include.is_dir():
            files += [{**f, "path": f"{include.resolve().name}/{f['path']}"}
                      for f in model_dir.package(include)]
        elif include.is_file():
            files.append(_included_file(include))
        else:
            raise CliError(f"--include {include}: no such file or directory", exit_code=2)
    return files


def _launch(ctx: typer.Context, kind: Kind, config: dict[str, Any], *, template: str | None,
            context: Path | None = None, includes: list[Path] | None = None,
            workspace_id: int | None = None, **extra: Any) -> dict[str, Any]:
    """Check the config here (every error at once, exit 2), then launch; the master's answer."""
    if template is None:
        from common.expconf import ConfigError, validate_task_config

        try:
            validate_task_config(config, kind.key.upper())
        except ConfigError as err:
            raise CliError(f"invalid {kind.key} config:", err.errors, exit_code=2) from None
    body = {"config": config, "files": _files(context, includes), "templateName": template,
            "workspaceId": workspace_id, **extra}
    with Client(master_url(ctx)) as client:
        answer: dict[str, Any] = client.post(f"/{kind.path}", body, timeout=UPLOAD_TIMEOUT)
    for warning in answer.get("configWarnings") or []:
        render.warn(str(warning))
    return answer


def _wait_ready(client: Client, kind: Kind, task_id: str) -> None:
    """Until the task's service answers; a task that ends first is an error saying how."""
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    said = False
    while time.monotonic() < deadline:
        task = client.get(f"/tasks/{task_id}").get("task") or {}
        if task.get("endTime"):
            item = client.get(f"/{kind.path}/{task_id}").get(kind.key) or {}
            raise CliError(f"{kind.key} {task_id} ended: {item.get('exitStatus') or 'killed'}")
        allocations = task.get("allocations") or [{}]
        if allocations[0].get("isReady"):
            return
        if not said:
            sys.stderr.write(f"Waiting for {kind.key} {task_id} to be ready...\n")
            said = True
        time.sleep(READY_POLL_SECONDS)
    raise CliError(f"{kind.key} {task_id} was not ready after {READY_TIMEOUT_SECONDS:.0f} s; "
                   f"it keeps waiting for slots (`epochal {kind.key} kill {task_id}` stops it)")


# -- ids, lists, kills and logs ---------------------------------------------------------------

def expand_id(client: Client, kind: Kind, prefix: str) -> str:
    """A task id from a unique prefix of it, as `det` takes them."""
    if is_task_uuid(prefix):
        return prefix
    ids = [t["id"] for t in client.get(f"/{kind.path}").get(kind.path) or []
           if str(t.get("id", "")).startswith(prefix)]
    if len(ids) != 1:
        raise CliError(f"{'no' if not ids else 'more than one'} {kind.key} id starts with "
                       f"{prefix!r}")
    return str(ids[0])


def list_tasks(ctx: typer.Context, kind: Kind, show_all: bool, as_json: bool) -> None:
    with Client(master_url(ctx)) as client:
        params = {} if show_all else {"users": client.get("/me")["user"]["username"]}
        answer = client.get(f"/{kind.path}", params)
    if as_json:
        render.print_json(answer)
        return
    items = answer.get(kind.path) or []
    if not items:
        render.say(f"No {kind.path}." + ("" if show_all else " (--all shows every user's)"))
        return
    t = render.table("ID", "User", "Description", "State", "Exit status", "Pool", "Started",
                     shrink=["Description", "Exit status", "User", "Pool", "Started"])
    for item in items:
        t.add_row(str(item["id"]), str(item.get("username")), str(item.get("description")),
                  render.state(item.get("state")), str(item.get("exitStatus") or "-"),
                  str(item.get("resourcePool")), render.when(item.get("startTime"), True))
    render.show(t)


def kill_tasks(ctx: typer.Context, kind: Kind, task_ids: list[str], as_json: bool) -> None:
    killed: list[str] = []
    with Client(master_url(ctx)) as client:
        for prefix in task_ids:
            task_id = expand_id(client, kind, prefix)
            client.post(f"/{kind.path}/{task_id}/kill")
            killed.append(task_id)
            if not as_json:
                render.say(f"Killed {kind.key} {task_id}")
    if as_json:
        render.print_json({"killed": killed})


def print_task_logs(client: Client, task_id: str, follow: bool, tail: int | None = None,
                    as_json: bool = False) -> None:
    """The task's output as it printed it (with --json each record, a JSON object a line);
    followed, until the task ends."""
    import json

    params: dict[str, Any] = {"follow": "true" if follow else "false"}
    if tail is not None:
        params.update(orderBy="ORDER_BY_DESC", limit=tail)
    records = client.stream_ndjson(f"/tasks/{task_id}/logs", params)
    if tail is not None:
        records = iter(list(records)[::-1])  # newest first from the master
    for record in records:
        if as_json:
            sys.stdout.write(json.dumps(record) + "\n")
            sys.stdout.flush()
            continue
        log = record.get("result") if isinstance(record, dict) else None
        if isinstance(log, dict):
            sys.stdout.write(str(log.get("log") or "").rstrip("\n") + "\n")
            sys.stdout.flush()


def _started(ctx: typer.Context, kind: Kind, config: dict[str, Any], detach: bool,
             as_json: bool, **launch: Any) -> str | None:
    """Launch the task: its id, or None when detached (then the id is printed) or with --json
    (then the master's answer is, and the command returns as detached)."""
    answer = _launch(ctx, kind, config, **launch)
    task_id = str(answer[kind.key]["id"])
    if as_json:
        render.print_json(answer)
        return None
    if detach:
        render.say(task_id)
        return None
    return task_id


def _say_served(ctx: typer.Context, kind: Kind, task_id: str, saying: str,
                as_json: bool = False) -> None:
    """Wait until the notebook's or TensorBoard's service answers, then print where: its path on
    the master (JupyterLab's own page for a notebook)."""
    with Client(master_url(ctx)) as client:
        _wait_ready(client, kind, task_id)
    page = "lab" if kind is NOTEBOOK else ""
    url = f"{master_url(ctx)}/proxy/{task_id}/{page}"
    render.done(as_json, {"id": task_id, "url": url}, f"{saying}{url}")


# -- commands --------------------------------------------------------------------------------

def exit_code_of(exit_status: str | None) -> int:
    """The command's own exit code, when its end says it; else EXIT_ENDED_OTHERWISE."""
    found = re.search(r"exited with code (-?\d+)", exit_status or "")
    if found is None:
        return EXIT_ENDED_OTHERWISE
    code = int(found.group(1))
    return code if 0 <= code <= 255 else 128 + abs(code) % 128  # killed by a signal


@cmd_app.command("run", help=(
    "Run ENTRYPOINT on the cluster's slots and print its output until it ends; exit with its "
    "exit code (1 when it was killed or never ran). A single argument is a shell command line "
    "(`epochal cmd run 'echo hi; nproc'`), several are the program and its arguments."))
def cmd_run(
    ctx: typer.Context,
    entrypoint: Annotated[list[str] | None, typer.Argument(help="The command to run.")] = None,
    config_file: ConfigFile = None,
    overrides: Overrides = None,
    context: ContextDir = None,
    includes: Includes = None,
    template: Template = None,
    workspace_id: WorkspaceId = None,
    detach: Detach = False,
    as_json: LaunchJson = False,
) -> None:
    config = read_config(config_file, overrides)
    if not config.get("entrypoint") and entrypoint:
        config["entrypoint"] = entrypoint
    task_id = _started(ctx, COMMAND, config, detach, as_json, template=template, context=context,
                       includes=includes, workspace_id=workspace_id)
    if task_id is None:
        return
    sys.stderr.write(f"Launched command {task_id}\n")
    with Client(master_url(ctx)) as client:
        print_task_logs(client, task_id, follow=True)
        command = client.get(f"/commands/{task_id}")["command"]
    raise typer.Exit(exit_code_of(command.get("exitStatus")))


@cmd_app.command("logs", help="Print a command's output.")
def cmd_logs(
    ctx: typer.Context,
    task_id: TaskId,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Until it ends.")] = False,
    tail: Annotated[int | None, typer.Option("--tail", min=1, help="Only the last N lines.")
                    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print each log record as JSON.")
                       ] = False,
) -> None:
    if follow and tail is not None:
        raise CliError("--follow and --tail cannot go together", exit_code=2)
    with Client(master_url(ctx)) as client:
        print_task_logs(client, expand_id(client, COMMAND, task_id), follow, tail, as_json)


# -- notebooks -------------------------------------------------------------------------------

@notebook_app.command("start", help=(
    "Start JupyterLab on the cluster's slots, wait until it answers and print its address "
    "(the master's proxy; open it in a browser logged in to the dashboard)."))
def notebook_start(
    ctx: typer.Context,
    config_file: ConfigFile = None,
    overrides: Overrides = None,
    context: ContextDir = None,
    includes: Includes = None,
    template: Template = None,
    workspace_id: WorkspaceId = None,
    detach: Detach = False,
    as_json: LaunchJson = False,
) -> None:
    task_id = _started(ctx, NOTEBOOK, read_config(config_file, overrides), detach, as_json,
                       template=template, context=context, includes=includes,
                       workspace_id=workspace_id)
    if task_id is not None:
        _say_served(ctx, NOTEBOOK, task_id, "JupyterLab is running at ")


@notebook_app.command("open", help="Print the address of a running notebook.")
def notebook_open(ctx: typer.Context, task_id: TaskId, as_json: AsJson = False) -> None:
    with Client(master_url(ctx)) as client:
        task_id = expand_id(client, NOTEBOOK, task_id)
    _say_served(ctx, NOTEBOOK, task_id, "", as_json)


# -- shells ----------------------------------------------------------------------------------

@contextlib.contextmanager
def _key_file(private_key: str) -> Iterator[str]:
    """The shell's private key in a file only this user reads (ssh refuses others)."""
    fd, path = tempfile.mkstemp(prefix="epochal-shell-", text=True)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(private_key)
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.remove(path)


def ssh_command(master: str, shell: dict[str, Any], key_path: str,
                ssh_options: list[str]) -> list[str]:
    """ssh to the shell's sshd through the master (Determined's `det shell open` runs the same,
    with its own tunnel module)."""
    user = (shell.get("agentUserGroup") or {}).get("user") or "root"
    return ["ssh", "-o", f"ProxyCommand={sys.executable} -m cli.tunnel {master} %h",
            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "IdentitiesOnly=yes", "-i", key_path, f"{user}@{shell['id']}", *ssh_options]


def _open_shell(ctx: typer.Context, task_id: str, ssh_options: list[str] | None) -> int:
    """ssh's exit status."""
    with Client(master_url(ctx)) as client:
        _wait_ready(client, SHELL, task_id)
        shell = client.get(f"/shells/{task_id}")["shell"]
    if not shell.get("privateKey"):
        raise CliError(f"shell {task_id} is {shell.get('username')}'s: only they (and admins) "
                       "hold its key")
    with _key_file(shell["privateKey"]) as key_path:
        command = ssh_command(master_url(ctx), shell, key_path, ssh_options or [])
        return subprocess.run(command, check=False).returncode


SshOptions = Annotated[list[str] | None, typer.Argument(
    help="Options and a command for ssh, after `--` (`-- ls -la`).")]


@shell_app.command("start", help=(
    "Start an SSH server on the cluster's slots and connect to it through the master; exit "
    "with ssh's exit status."))
def shell_start(
    ctx: typer.Context,
    ssh_options: SshOptions = None,
    config_file: ConfigFile = None,
    overrides: Overrides = None,
    context: ContextDir = None,
    includes: Includes = None,
    template: Template = None,
    workspace_id: WorkspaceId = None,
    detach: Detach = False,
    as_json: LaunchJson = False,
) -> None:
    task_id = _started(ctx, SHELL, read_config(config_file, overrides), detach, as_json,
                       template=template, context=context, includes=includes,
                       workspace_id=workspace_id)
    if task_id is None:
        return
    code = _open_shell(ctx, task_id, ssh_options)
    sys.stderr.write(f"To reconnect: epochal shell open {task_id}\n")
    raise typer.Exit(code)


@shell_app.command("open", help="Connect to a running shell; exit with ssh's exit status. "
                   "With --json, print the shell (without its private key) instead.")
def shell_open(ctx: typer.Context, task_id: TaskId, ssh_options: SshOptions = None,
               as_json: AsJson = False) -> None:
    with Client(master_url(ctx)) as client:
        task_id = expand_id(client, SHELL, task_id)
        if as_json:
            answer = client.get(f"/shells/{task_id}")
            shell = answer.get("shell")
            if isinstance(shell, dict):
                shell.pop("privateKey", None)  # stdout may end up in logs
            render.print_json(answer)
            return
    raise typer.Exit(_open_shell(ctx, task_id, ssh_options))


# -- TensorBoards ----------------------------------------------------------------------------

@tensorboard_app.command("start", help=(
    "Start a TensorBoard of experiments' (or trials') metrics, wait until it answers and print "
    "its address (the master's proxy)."))
def tensorboard_start(
    ctx: typer.Context,
    experiment_ids: Annotated[list[int] | None, typer.Argument(
        metavar="EXPERIMENT_ID...", help="Experiments to show.")] = None,
    trial_ids: Annotated[list[int] | None, typer.Option(
        "--trial-ids", "-t", help="Trials to show; repeatable.")] = None,
    config_file: ConfigFile = None,
    overrides: Overrides = None,
    template: Template = None,
    workspace_id: WorkspaceId = None,
    detach: Detach = False,
    as_json: LaunchJson = False,
) -> None:
    if not experiment_ids and not trial_ids:
        raise CliError("name experiments (EXPERIMENT_ID...) or trials (--trial-ids)",
                       exit_code=2)
    task_id = _started(ctx, TENSORBOARD, read_config(config_file, overrides), detach, as_json,
                       template=template, workspace_id=workspace_id,
                       experimentIds=experiment_ids or [], trialIds=trial_ids or [])
    if task_id is not None:
        _say_served(ctx, TENSORBOARD, task_id, "TensorBoard is running at ")


# -- what every kind has ---------------------------------------------------------------------

def _list_and_kill(app: typer.Typer, kind: Kind) -> None:
    @app.command("list", help=f"List your {kind.path} (--all: every user's).")
    def list_command(ctx: typer.Context, show_all: ShowAll = False,
                     as_json: AsJson = False) -> None:
        list_tasks(ctx, kind, show_all, as_json)

    @app.command("kill", help=f"Stop {kind.path}.")
    def kill_command(ctx: typer.Context, task_ids: Annotated[list[str], typer.Argument(
            metavar="ID...", help="Their ids (or unique prefixes).")],
                     as_json: AsJson = False) -> None:
        kill_tasks(ctx, kind, task_ids, as_json)


for _app, _kind in ((cmd_app, COMMAND), (notebook_app, NOTEBOOK), (shell_app, SHELL),
                    (tensorboard_app, TENSORBOARD)):
    _list_and_kill(_app, _kind)
