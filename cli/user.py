"""`epochal user ...`: log in and out, and manage the master's users."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from cli import credentials, render
from cli.client import ApiError, Client, CliError, master_url

app = typer.Typer(help="Log in and out; create, list and change users.", no_args_is_help=True)

AsJson = Annotated[bool, typer.Option("--json", help="Print the server's JSON.")]

PASSWORD_ENV = "EPOCHAL_PASSWORD"


def ask_password(prompt: str, *, confirm: bool = False, env_name: str = PASSWORD_ENV) -> str:
    """The password from $EPOCHAL_PASSWORD (scripts; `env_name`), else asked without echo;
    without a terminal, the first line of stdin (`... | epochal user login NAME`)."""
    env = os.environ.get(env_name)
    if env:
        return env
    if not sys.stdin.isatty():  # getpass would warn that it cannot hide the input
        line = sys.stdin.readline().rstrip("\r\n")
        if not line:
            raise CliError(f"no password given: no terminal to ask on and nothing on stdin "
                           f"(pipe it in, or set ${env_name})")
        return line
    try:
        return str(typer.prompt(prompt, hide_input=True, confirmation_prompt=confirm))
    except typer.Abort:
        raise CliError(f"no password given (type it, or set ${env_name})") from None


def log_in(url: str, username: str, password: str) -> str:
    """Log in at `url` and remember the token for later commands; the token is returned."""
    with Client(url, anonymous=True) as client:
        answer = client.post(
            "/auth/login", {"username": username, "password": password, "isHashed": False}
        )
    token = str(answer["token"])
    credentials.remember(url, username, token)
    return token


@app.command("login", help="Log in to the master; later commands use the token it gives.")
def login(
    ctx: typer.Context,
    username: Annotated[str, typer.Argument(help="Who to log in as.")] = "admin",
    as_json: Annotated[bool, typer.Option("--json", help="Print who logged in where as JSON "
                                          "(not the token).")] = False,
) -> None:
    url = master_url(ctx)
    log_in(url, username, ask_password(f"Password for {username}"))
    render.done(as_json, {"master": url, "username": username},
                f"Logged in to {url} as {username}.")


@app.command("logout", help="End this CLI's session with the master.")
def logout(ctx: typer.Context, as_json: AsJson = False) -> None:
    url = master_url(ctx)
    if credentials.token_for(url) is None:
        render.done(as_json, {"master": url, "loggedOut": False}, f"Not logged in to {url}.")
        return
    with Client(url) as client:
        try:
            client.post("/auth/logout")
        except ApiError as err:
            if err.status != 401:  # an expired token: forgetting it is all that is left
                raise
    credentials.forget(url)
    render.done(as_json, {"master": url, "loggedOut": True}, f"Logged out of {url}.")


@app.command("whoami", help="Which user this CLI is logged in as.")
def whoami(ctx: typer.Context, as_json: AsJson = False) -> None:
    with Client(master_url(ctx)) as client:
        answer = client.get("/me")
    user = answer["user"]
    role = " (admin)" if user.get("admin") else ""
    render.done(as_json, answer, f"You are logged in as user '{user['username']}'{role}.")


@app.command("list", help="List the master's users.")
def list_users(ctx: typer.Context, as_json: AsJson = False) -> None:
    with Client(master_url(ctx)) as client:
        answer = client.get("/users")
    if as_json:
        render.print_json(answer)
        return
    t = render.table("ID", "Username", "Display name", "Admin", "Active")
    for u in answer.get("users") or []:
        t.add_row(
            str(u["id"]),
            u["username"],
            u.get("displayName") or "",
            "yes" if u.get("admin") else "no",
            "yes" if u.get("active") else "no",
        )
    render.show(t)


@app.command("create", help="Create a user (admins only).")
def create(
    ctx: typer.Context,
    username: Annotated[str, typer.Argument(help="The new user's name.")],
    admin: Annotated[bool, typer.Option("--admin", help="Make the user an admin.")] = False,
    as_json: AsJson = False,
) -> None:
    password = ask_password(f"Password for {username}", confirm=True)
    with Client(master_url(ctx)) as client:
        answer = client.post(
            "/users",
            {"user": {"username": username, "admin": admin, "active": True},
             "password": password, "isHashed": False},
        )
    render.done(as_json, answer,
                f"Created user {answer['user']['username']} (id {answer['user']['id']}).")


@app.command("change-password", help="Change your password, or (admins) another user's.")
def change_password(
    ctx: typer.Context,
    username: Annotated[
        str | None, typer.Argument(help="Whose password [the logged-in user's].")
    ] = None,
    as_json: AsJson = False,
) -> None:
    url = master_url(ctx)
    with Client(url) as client:
        me = client.get("/me")["user"]
        target = me if username in (None, me["username"]) else client.get(
            f"/users/{username}/by-username"
        )["user"]
        password = ask_password(f"New password for {target['username']}", confirm=True)
        client.request(
            "PATCH", f"/users/{target['id']}", json={"password": password, "isHashed": False}
        )
    if target["id"] == me["id"]:
        log_in(url, target["username"], password)
    render.done(as_json, {"username": target["username"], "passwordChanged": True},
                f"Changed the password of {target['username']}.")
