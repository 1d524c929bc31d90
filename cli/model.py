"""`epochal model ...`: the model registry (api/routes/models.py), as `det model ...` has it."""

from __future__ import annotations

import json
from typing import Annotated, Any
from urllib.parse import quote

import typer

from cli import render
from cli.client import Client, master_url

app = typer.Typer(
    help="The model registry: named models whose numbered versions are checkpoints "
         "(a registered checkpoint is never garbage-collected).",
    no_args_is_help=True)

AsJson = Annotated[bool, typer.Option("--json", help="Print the server's JSON.")]
ModelArg = Annotated[str, typer.Argument(metavar="MODEL", help="Model name or id.",
                                         show_default=False)]


def _path(model: str) -> str:
    return f"/models/{quote(model, safe='')}"


def _model_fields(model: dict[str, Any]) -> Any:
    return render.fields([
        ("ID", model["id"]), ("Name", model["name"]), ("Description", model["description"]),
        ("Workspace ID", model["workspaceId"]), ("Owner", model["username"]),
        ("Versions", model["numVersions"]), ("Labels", ", ".join(model["labels"])),
        ("Latest version", render.number(model.get("latestVersion"))),
        ("Archived", "yes" if model["archived"] else "no"),
        ("Created", render.when(model["creationTime"])),
        ("Updated", render.when(model["lastUpdatedTime"])),
        ("Metadata", json.dumps(model["metadata"]) if model["metadata"] else ""),
    ])


def _versions_table(versions: list[dict[str, Any]],
                    aliases: list[dict[str, Any]] | None = None) -> Any:
    named: dict[int, list[str]] = {}
    for a in aliases or []:
        named.setdefault(a["version"], []).append(a["alias"])
    t = render.table("Version", "Checkpoint", "Trial", "Steps", "State", "Searcher metric",
                     *(["Aliases"] if aliases else []), "Comment", "Registered",
                     shrink=["Comment", "Searcher metric", "Registered", "Checkpoint"])
    for v in versions:
        checkpoint = v["checkpoint"]
        training = render.checkpoint_training(checkpoint)
        t.add_row(str(v["version"]), checkpoint["uuid"], render.number(training.get("trialId")),
                  render.number(render.checkpoint_steps(checkpoint)),
                  render.state(checkpoint["state"]),
                  render.number(training.get("searcherMetric")),
                  *([", ".join(named.get(v["version"], []))] if aliases else []), v["comment"],
                  render.when(v["creationTime"], compact=True))
    return t


@app.command("list", help="List models.")
def list_models(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Option(help="Only names containing this.")] = None,
    label: Annotated[list[str] | None, typer.Option(help="Only models with this label "
                                                    "(repeatable).")] = None,
    archived: Annotated[bool, typer.Option("--archived", help="Include archived models.")] = False,
    as_json: AsJson = False,
) -> None:
    params: dict[str, Any] = {"sortBy": "SORT_BY_NAME"}
    if name:
        params["name"] = name
    if label:
        params["labels"] = label
    if not archived:
        params["archived"] = "false"
    with Client(master_url(ctx)) as client:
        answer = client.get_all("/models", "models", params)
    if as_json:
        render.print_json(answer)
        return
    t = render.table("ID", "Name", "Versions", "Workspace ID", "Owner", "Labels", "Updated",
                     "Description", shrink=["Description", "Labels", "Name", "Owner"])
    for m in answer["models"]:
        t.add_row(str(m["id"]), m["name"], str(m["numVersions"]), str(m["workspaceId"]),
                  m["username"], ", ".join(m["labels"]),
                  render.when(m["lastUpdatedTime"], compact=True), m["description"])
    render.show(t)


@app.command("create", help="Create a model.")
def create_model(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", show_default=False)],
    description: Annotated[str, typer.Option(help="What the model is.")] = "",
    label: Annotated[list[str] | None, typer.Option(help="A label (repeatable).")] = None,
    workspace: Annotated[str | None, typer.Option(help="Workspace name (default: "
                                                  "Uncategorized).")] = None,
    as_json: AsJson = False,
) -> None:
    body: dict[str, Any] = {"name": name, "description": description, "labels": label or []}
    if workspace:
        body["workspaceName"] = workspace
    with Client(master_url(ctx)) as client:
        model = client.post("/models", body)["model"]
    if as_json:
        render.print_json(model)
        return
    render.say(f"Created model {model['name']} (id {model['id']})")


@app.command("describe", help="Show a model, its versions and its aliases.")
def describe_model(ctx: typer.Context, model: ModelArg, as_json: AsJson = False) -> None:
    with Client(master_url(ctx)) as client:
        answer = client.get_all(f"{_path(model)}/versions", "modelVersions")
        found = client.get(_path(model))["model"]
        aliases = client.get(f"{_path(model)}/aliases")["aliases"]
    if as_json:
        render.print_json({"model": found, "modelVersions": answer["modelVersions"],
                           "aliases": aliases})
        return
    render.show(_model_fields(found))
    render.show(_versions_table(answer["modelVersions"], aliases))


@app.command("list-versions", help="List a model's versions.")
def list_versions(ctx: typer.Context, model: ModelArg, as_json: AsJson = False) -> None:
    with Client(master_url(ctx)) as client:
        answer = client.get_all(f"{_path(model)}/versions", "modelVersions")
    if as_json:
        render.print_json(answer)
        return
    render.show(_versions_table(answer["modelVersions"]))


@app.command("register-version", help="Register a checkpoint as the model's next version.")
def register_version(
    ctx: typer.Context,
    model: ModelArg,
    checkpoint: Annotated[str, typer.Argument(metavar="CHECKPOINT_UUID", show_default=False)],
    comment: Annotated[str, typer.Option(help="A note kept with the version.")] = "",
    as_json: AsJson = False,
) -> None:
    with Client(master_url(ctx)) as client:
        version = client.post(f"{_path(model)}/versions",
                              {"checkpointUuid": checkpoint, "comment": comment})["modelVersion"]
    if as_json:
        render.print_json(version)
        return
    render.say(f"Registered checkpoint {checkpoint} as version {version['version']} of model"
               f" {version['model']['name']}")


@app.command("delete", help="Delete a model and its versions (their checkpoints stay).")
def delete_model(ctx: typer.Context, model: ModelArg, as_json: AsJson = False) -> None:
    with Client(master_url(ctx)) as client:
        client.request("DELETE", _path(model))
    render.done(as_json, {"model": model, "deleted": True}, f"Deleted model {model}")


@app.command("delete-version", help="Delete one version of a model (its checkpoint stays).")
def delete_version(
    ctx: typer.Context, model: ModelArg,
    version: Annotated[int, typer.Argument(metavar="VERSION", show_default=False)],
    as_json: AsJson = False,
) -> None:
    with Client(master_url(ctx)) as client:
        client.request("DELETE", f"{_path(model)}/versions/{version}")
    render.done(as_json, {"model": model, "version": version, "deleted": True},
                f"Deleted version {version} of model {model}")


alias_app = typer.Typer(
    help="Aliases (MLflow's): a name such as 'production' pointing at one version of a model; "
         "setting it on another version moves it.",
    no_args_is_help=True)
app.add_typer(alias_app, name="alias")
AliasArg = Annotated[str, typer.Argument(metavar="ALIAS", show_default=False,
                                         help="A letter, then letters, digits, '_', '.', '-'.")]


def _aliases_table(aliases: list[dict[str, Any]]) -> Any:
    t = render.table("Alias", "Version", "Set by", "Updated", shrink=["Alias", "Set by"])
    for a in aliases:
        t.add_row(a["alias"], str(a["version"]), a["username"],
                  render.when(a["lastUpdatedTime"], compact=True))
    return t


@alias_app.command("list", help="List a model's aliases.")
def list_aliases(ctx: typer.Context, model: ModelArg, as_json: AsJson = False) -> None:
    with Client(master_url(ctx)) as client:
        answer = client.get(f"{_path(model)}/aliases")
    if as_json:
        render.print_json(answer)
        return
    render.show(_aliases_table(answer["aliases"]))


@alias_app.command("set", help="Point ALIAS at VERSION of the model (moving it from another).")
def set_alias(
    ctx: typer.Context, model: ModelArg, alias: AliasArg,
    version: Annotated[int, typer.Argument(metavar="VERSION", show_default=False)],
    as_json: AsJson = False,
) -> None:
    with Client(master_url(ctx)) as client:
        answer = client.request("PUT", f"{_path(model)}/aliases/{quote(alias, safe='')}",
                                json={"version": version})
    render.done(as_json, answer, f"Alias {alias} of model {model} now points at version"
                                 f" {version}")


@alias_app.command("delete", help="Delete an alias of the model (its version stays).")
def delete_alias(ctx: typer.Context, model: ModelArg, alias: AliasArg,
                 as_json: AsJson = False) -> None:
    with Client(master_url(ctx)) as client:
        answer = client.request("DELETE",
                                f"{_path(model)}/aliases/{quote(alias, safe='')}")
    render.done(as_json, answer, f"Deleted alias {alias} of model {model}")
