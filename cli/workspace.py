"""`epochal workspace|project|template ...`: Determined's folders for experiments and its config
templates, as the master keeps them (api/routes/workspaces.py, api/routes/templates.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import typer

from cli import render
from cli.client import Client, CliError, master_url

workspace_app = typer.Typer(help="List and create workspaces.", no_args_is_help=True)
project_app = typer.Typer(help="List and create projects (inside workspaces).",
                          no_args_is_help=True)
template_app = typer.Typer(
    help="Config templates: partial configs merged under an experiment's config "
         "(`epochal experiment create --template NAME`).",
    no_args_is_help=True)

AsJson = Annotated[bool, typer.Option("--json", help="Print the server's JSON.")]
WorkspaceArg = Annotated[str, typer.Argument(metavar="WORKSPACE", help="Workspace name.",
                                             show_default=False)]
NameArg = Annotated[str, typer.Argument(metavar="NAME", show_default=False)]


def workspace_by_name(client: Client, name: str) -> dict[str, Any]:
    found = client.get("/workspaces", params={"nameCaseSensitive": name}).get("workspaces") or []
    if not found:
        raise CliError(f"workspace {name!r} not found")
    workspace: dict[str, Any] = found[0]
    return workspace


# -- workspaces ------------------------------------------------------------------------------

@workspace_app.command("list", help="List workspaces.")
def list_workspaces(ctx: typer.Context, as_json: AsJson = False) -> None:
    with Client(master_url(ctx)) as client:
        answer = client.get_all("/workspaces", "workspaces")
    if as_json:
        render.print_json(answer)
        return
    t = render.table("ID", "Name", "Projects", "Experiments", "Owner", shrink=["Name", "Owner"])
    for w in answer["workspaces"]:
        t.add_row(str(w["id"]), w["name"], str(w["numProjects"]), str(w["numExperiments"]),
                  str(w["username"]))
    render.show(t)


@workspace_app.command("create", help="Create a workspace.")
def create_workspace(ctx: typer.Context, name: NameArg, as_json: AsJson = False) -> None:
    with Client(master_url(ctx)) as client:
        answer = client.post("/workspaces", {"name": name})
    workspace = answer["workspace"]
    render.done(as_json, answer, f"Created workspace {workspace['name']} (id {workspace['id']})")


def _max_slots(text: str) -> int | None:
    if text.strip().lower() == "none":
        return None
    if not text.strip().isdigit():
        raise typer.BadParameter(f"a number of slots (0 or more) or none, got {text!r}")
    return int(text)


@workspace_app.command(
    "set-max-slots",
    help="The most slots the workspace's experiments and tasks hold at once (`none`: no cap; "
         "admins only).")
def set_max_slots(
    ctx: typer.Context, name: WorkspaceArg,
    max_slots: Annotated[str, typer.Argument(metavar="N|none", show_default=False)],
    as_json: AsJson = False,
) -> None:
    cap = _max_slots(max_slots)
    with Client(master_url(ctx)) as client:
        workspace_id = workspace_by_name(client, name)["id"]
        answer = client.request("PATCH", f"/workspaces/{workspace_id}", json={"maxSlots": cap})
    render.done(as_json, answer, f"Workspace {name}: " + (
        "no slot cap" if cap is None else f"at most {cap} slot{'s' if cap != 1 else ''} at once"))


@workspace_app.command(
    "set-default-pools",
    help="Where the workspace's submissions that name no resource pool go (an empty name: "
         "the cluster's default).")
def set_default_pools(
    ctx: typer.Context, name: WorkspaceArg,
    compute: Annotated[str | None, typer.Option(
        "--compute", help="Pool of experiments and tasks with slots.")] = None,
    aux: Annotated[str | None, typer.Option(
        "--aux", help="Pool of tasks with 0 slots.")] = None,
    as_json: AsJson = False,
) -> None:
    with Client(master_url(ctx)) as client:
        workspace_id = workspace_by_name(client, name)["id"]
        answer = client.request("PATCH", f"/workspaces/{workspace_id}", json={
            "defaultComputeResourcePool": compute, "defaultAuxResourcePool": aux})
    shown = answer.get("workspace") or {}
    render.done(as_json, answer, f"Workspace {name}: compute pool"
                f" {shown.get('defaultComputePool') or 'default'}, aux pool"
                f" {shown.get('defaultAuxPool') or 'default'}")


# -- projects --------------------------------------------------------------------------------

@project_app.command("list", help="List the projects of a workspace (of every one without it).")
def list_projects(
    ctx: typer.Context,
    workspace: Annotated[str | None, typer.Argument(metavar="[WORKSPACE]",
                                                    show_default=False)] = None,
    as_json: AsJson = False,
) -> None:
    with Client(master_url(ctx)) as client:
        workspace_id = workspace_by_name(client, workspace)["id"] if workspace else 0
        answer = client.get_all(f"/workspaces/{workspace_id}/projects", "projects")
    if as_json:
        render.print_json(answer)
        return
    t = render.table("ID", "Workspace", "Name", "Key", "Experiments", "Active", "Description",
                     shrink=["Description", "Workspace", "Name"])
    for p in answer["projects"]:
        t.add_row(str(p["id"]), p["workspaceName"], p["name"], p["key"],
                  str(p["numExperiments"]), str(p["numActiveExperiments"]), p["description"])
    render.show(t)


@project_app.command("create", help="Create a project in a workspace.")
def create_project(
    ctx: typer.Context,
    workspace: WorkspaceArg,
    name: NameArg,
    description: Annotated[str, typer.Option("--description", "-d")] = "",
    key: Annotated[str | None, typer.Option("--key", help="1 to 5 letters or digits.")] = None,
    as_json: AsJson = False,
) -> None:
    with Client(master_url(ctx)) as client:
        workspace_id = workspace_by_name(client, workspace)["id"]
        answer = client.post(f"/workspaces/{workspace_id}/projects",
                             {"name": name, "description": description, "key": key})
    project = answer["project"]
    render.done(as_json, answer,
                f"Created project {project['name']} (id {project['id']}, key {project['key']})"
                f" in workspace {workspace}")


# -- templates -------------------------------------------------------------------------------

def _template_path(name: str) -> str:
    return f"/templates/{quote(name, safe='')}"


@template_app.command("list", help="List config templates.")
def list_templates(ctx: typer.Context, as_json: AsJson = False) -> None:
    with Client(master_url(ctx)) as client:
        answer = client.get_all("/templates", "templates")
    if as_json:
        render.print_json(answer)
        return
    t = render.table("Name", "Workspace", "Fields", shrink=["Fields", "Name"])
    for tpl in answer["templates"]:
        t.add_row(tpl["name"], str(tpl["workspaceId"]), ", ".join(sorted(tpl["config"])))
    render.show(t)


@template_app.command("describe", help="Print a template's config as YAML.")
def describe_template(ctx: typer.Context, name: NameArg, as_json: AsJson = False) -> None:
    with Client(master_url(ctx)) as client:
        answer = client.get(_template_path(name))
    if as_json:
        render.print_json(answer)
        return
    import yaml  # here: only the template commands read or write YAML

    print(yaml.safe_dump(answer["template"]["config"], sort_keys=False), end="")


@template_app.command("set", help="Create or replace a template from a YAML file.")
def set_template(
    ctx: typer.Context,
    name: NameArg,
    path: Annotated[Path, typer.Argument(metavar="FILE", help="Partial config (YAML).",
                                         show_default=False)],
    as_json: AsJson = False,
) -> None:
    import yaml

    try:
        config = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise CliError(f"cannot read {path}: {err}", exit_code=2) from None
    if not isinstance(config, dict):
        raise CliError(f"{path}: a template is a mapping of config fields", exit_code=2)
    with Client(master_url(ctx)) as client:
        answer = client.request("PUT", _template_path(name),
                                json={"name": name, "config": config})
    render.done(as_json, answer if isinstance(answer, dict) and answer else {"name": name},
                f"Set template {name}")


@template_app.command("remove", help="Remove a template.")
def remove_template(ctx: typer.Context, name: NameArg, as_json: AsJson = False) -> None:
    with Client(master_url(ctx)) as client:
        client.request("DELETE", _template_path(name))
    render.done(as_json, {"name": name, "removed": True}, f"Removed template {name}")
