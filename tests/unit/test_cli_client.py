"""The CLI's HTTP client: which master, and how failures read."""

from __future__ import annotations

import io
import socket
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

import cli.client
from cli.client import resolve_master
from cli.main import app
from tests.fakes.cli_master import FakeMaster, error, unreachable


def run(*args: str, env: dict[str, str | None] | None = None):
    return CliRunner().invoke(app, list(args), env={"EPOCHAL_MASTER": None, **(env or {})})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_master_url_from_option_else_env_else_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EPOCHAL_MASTER", raising=False)
    assert resolve_master(None) == "http://127.0.0.1:8080"
    monkeypatch.setenv("EPOCHAL_MASTER", "http://master.lan:9000/")
    assert resolve_master(None) == "http://master.lan:9000"
    assert resolve_master("10.1.2.3:8080") == "http://10.1.2.3:8080"


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        ([], {}, "http://127.0.0.1:8080/api/v1/agents"),
        ([], {"EPOCHAL_MASTER": "http://envhost:1234"}, "http://envhost:1234/api/v1/agents"),
        (
            ["-m", "http://opt:5"],
            {"EPOCHAL_MASTER": "http://envhost:1234"},
            "http://opt:5/api/v1/agents",
        ),
        (["--master", "https://secure.example"], {}, "https://secure.example/api/v1/agents"),
    ],
)
def test_commands_use_the_resolved_master(
    monkeypatch: pytest.MonkeyPatch, args: list[str], env: dict[str, str], expected: str
) -> None:
    fake = FakeMaster().on("GET", "/agents", {"agents": []})
    monkeypatch.setattr(cli.client, "transport_factory", fake.transport)

    result = run(*args, "agent", "list", env=env)

    assert result.exit_code == 0, result.output
    assert str(fake.requests[0].url) == expected


def test_unreachable_master_real_socket() -> None:
    url = f"http://127.0.0.1:{free_port()}"

    result = run("-m", url, "experiment", "list")

    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: cannot reach the master at {url}: ")
    assert result.stderr.endswith("(is the cluster up? `epochal cluster up`)\n")
    assert "Traceback" not in result.output


def test_unreachable_master_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli.client, "transport_factory", lambda: httpx.MockTransport(unreachable))

    result = run("trial", "describe", "3")

    assert result.exit_code == 1
    assert result.stderr == (
        "error: cannot reach the master at http://127.0.0.1:8080: [Errno 111] Connection "
        "refused (is the cluster up? `epochal cluster up`)\n"
    )


def test_4xx_message_and_details_printed_plainly(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeMaster().on(
        "GET", "/trials/3", error(400, "invalid request", ["trial_id: must be an integer"])
    )
    monkeypatch.setattr(cli.client, "transport_factory", fake.transport)

    result = run("trial", "describe", "3")

    assert result.exit_code == 1
    assert result.stderr == "error: invalid request\n  trial_id: must be an integer\n"


def test_error_without_the_contract_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeMaster().on("GET", "/agents", httpx.Response(502, text="Bad Gateway"))
    monkeypatch.setattr(cli.client, "transport_factory", fake.transport)

    result = run("agent", "list")

    assert result.exit_code == 1
    assert result.stderr == (
        "error: the master answered 502 Bad Gateway to GET /api/v1/agents: Bad Gateway\n"
    )


def test_server_failure_says_it_was_the_master(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeMaster().on("GET", "/agents", error(500, "database is down"))
    monkeypatch.setattr(cli.client, "transport_factory", fake.transport)

    result = run("agent", "list")

    assert result.exit_code == 1
    assert result.stderr == (
        "error: the master failed on GET /api/v1/agents (500): database is down\n"
    )


def test_fastapi_default_error_shape_is_understood(monkeypatch: pytest.MonkeyPatch) -> None:
    body = {"detail": [{"loc": ["query", "limit"], "msg": "must be <= 1000"}]}
    fake = FakeMaster().on("GET", "/agents", httpx.Response(422, json=body))
    monkeypatch.setattr(cli.client, "transport_factory", fake.transport)

    result = run("agent", "list")

    assert result.exit_code == 1
    assert "limit: must be <= 1000" in result.stderr


def test_help_is_fast_to_import() -> None:
    """The root command must not import the heavy parts (Temporal, the server, the config)."""
    import subprocess
    import sys

    code = (
        "import sys, cli.main; "
        "heavy = [m for m in ('temporalio', 'deploy.local_cluster', 'common.expconf', "
        "'fastapi', 'asyncpg', 'pydantic', 'httpx') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_a_401_without_a_login_says_to_log_in(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    """Not the server's words for API clients (an Authorization header to send)."""
    fake = FakeMaster().on("GET", "/me", error(401, "not logged in: send 'Authorization: "
                                                    "Bearer <token>'"))
    monkeypatch.setattr(cli.client, "transport_factory", fake.transport)
    logged_out = {"EPOCHAL_AUTH_FILE": str(tmp_path / "auth.json"), "EPOCHAL_TOKEN": None}

    result = run("-m", "http://master.example:8080", "user", "whoami", env=logged_out)

    assert result.exit_code == 1
    assert result.stderr == ("error: not logged in to http://master.example:8080: log in with "
                             "`epochal user login NAME` (or point -m / EPOCHAL_MASTER at the "
                             "master you are logged in to)\n")
    # Logged in with a token the master refuses: the master's own words (expired, revoked).
    fake.on("GET", "/me", error(401, "token expired: log in again (`epochal user login`)"))
    result = run("-m", "http://master.example:8080", "user", "whoami",
                 env={**logged_out, "EPOCHAL_TOKEN": "eps.old"})
    assert result.stderr == "error: token expired: log in again (`epochal user login`)\n"
    # A refused login keeps its own words.
    fake.on("POST", "/auth/login", error(401, "invalid username or password"))
    result = run("-m", "http://master.example:8080", "user", "login", "alice",
                 env={**logged_out, "EPOCHAL_PASSWORD": "wrong-password"})
    assert result.stderr == "error: invalid username or password\n"


def test_a_password_comes_from_stdin_without_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """`echo pw | epochal user login NAME`: no getpass warning, no prompt."""
    from cli.user import ask_password

    monkeypatch.delenv("EPOCHAL_PASSWORD", raising=False)
    monkeypatch.setattr("sys.stdin", io.StringIO("s3cret-pass\n"))
    assert ask_password("Password for alice") == "s3cret-pass"
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    with pytest.raises(cli.client.CliError, match="no terminal to ask on and nothing on stdin"):
        ask_password("Password for alice")
