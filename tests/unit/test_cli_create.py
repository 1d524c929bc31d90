"""`epochal experiment create`: local validation, the request body, errors before sending."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from typer.testing import CliRunner

import cli.client
from cli import model_dir
from cli.main import app
from tests.fakes.cli_master import FakeMaster

CONFIG = """\
name: digits
entrypoint: python3 train.py --epochs 2
hyperparameters:
  lr: 0.1
searcher:
  name: single
  metric: validation_loss
  max_length:
    batches: 10
"""

CREATED = {
    "experiment": {"id": 7, "name": "digits", "state": "STATE_ACTIVE"},
    "config": {"name": "digits"},
    "warnings": [],
}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeMaster:
    master = FakeMaster()
    monkeypatch.setattr(cli.client, "transport_factory", master.transport)
    return master


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path]:
    model = tmp_path / "model"
    model.mkdir()
    (model / "train.py").write_text("print('training')\n")
    (model / "data").mkdir()
    (model / "data" / "big.npy").write_bytes(b"0" * 1000)
    (model / ".epochalignore").write_text("data/\n")
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    return config, model


def run(*args: str) -> object:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", "EPOCHAL_MASTER": None})


def test_create_posts_config_and_model_definition(fake: FakeMaster, project) -> None:
    config, model = project
    fake.on("POST", "/experiments", CREATED)

    result = run("experiment", "create", str(config), str(model))

    assert result.exit_code == 0, result.output
    assert result.stdout == "Created experiment 7\n"
    body = fake.body("POST", "/experiments")
    assert body["config"] == CONFIG
    assert body["activate"] is True
    files = {f["path"]: f for f in body["modelDefinition"]}
    assert set(files) == {"train.py"}  # data/ left out by .epochalignore
    assert base64.b64decode(files["train.py"]["content"]) == b"print('training')\n"
    assert files["train.py"]["type"] == 48
    request = fake.sent("POST", "/experiments")[0]
    assert str(request.url).startswith("http://127.0.0.1:8080/api/v1/")


def test_create_json_prints_the_servers_answer(fake: FakeMaster, project) -> None:
    config, model = project
    fake.on("POST", "/experiments", {**CREATED, "warnings": ["slow disk"]})

    result = run("experiment", "create", str(config), str(model), "--json")

    assert result.exit_code == 0, result.output
    import json

    assert json.loads(result.stdout)["experiment"]["id"] == 7


def test_create_prints_server_warnings(fake: FakeMaster, project) -> None:
    config, model = project
    fake.on("POST", "/experiments", {**CREATED, "warnings": ["no GPU in pool default"]})

    result = run("experiment", "create", str(config), str(model))

    assert result.exit_code == 0
    assert "warning: no GPU in pool default" in result.stderr


def test_invalid_config_lists_every_error_and_exits_2(fake: FakeMaster, tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(
        "entrypoint: python3 train.py\n"
        "searcher:\n  name: single\n  max_length: {batches: -1}\n"
        "max_restarts: -2\n"
    )
    (tmp_path / "train.py").write_text("")

    result = run("experiment", "create", str(config), str(tmp_path))

    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert lines[0] == f"error: invalid experiment config {config}:"
    errors = "\n".join(lines[1:])
    assert "searcher.metric" in errors
    assert "searcher.max_length.batches" in errors
    assert "max_restarts" in errors
    assert len(lines) >= 4  # every error on its own line
    assert "Traceback" not in result.output
    assert fake.requests == []  # nothing was sent


def test_config_errors_are_printed_as_the_parser_gives_them(
    fake: FakeMaster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import common.expconf as expconf

    def parse(text: str, source: str = "config", default_storage: object = None):
        raise expconf.ConfigError(["a.b: field required", "c: must be >= 0 (got -1)"], source)

    monkeypatch.setattr(expconf, "parse_experiment_config", parse)
    config = tmp_path / "c.yaml"
    config.write_text("whatever: 1\n")

    result = run("experiment", "create", str(config), str(tmp_path))

    assert result.exit_code == 2
    assert result.stderr == (
        f"error: invalid experiment config {config}:\n"
        "  a.b: field required\n"
        "  c: must be >= 0 (got -1)\n"
    )


def test_yaml_syntax_error_exits_2(fake: FakeMaster, tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("name: [unclosed\n")

    result = run("experiment", "create", str(config), str(tmp_path))

    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: invalid experiment config {config}:\n")


def test_missing_config_file(fake: FakeMaster, tmp_path: Path) -> None:
    result = run("experiment", "create", str(tmp_path / "nope.yaml"), str(tmp_path))

    assert result.exit_code == 2
    assert result.stderr == f"error: experiment config {tmp_path / 'nope.yaml'} does not exist\n"


def test_missing_entrypoint_script_is_named(fake: FakeMaster, project) -> None:
    config, model = project
    (model / "train.py").unlink()

    result = run("experiment", "create", str(config), str(model))

    assert result.exit_code == 2
    assert "train.py" in result.stderr
    assert str(model) in result.stderr
    assert fake.requests == []


def test_entrypoint_left_out_by_epochalignore(fake: FakeMaster, project) -> None:
    config, model = project
    (model / ".epochalignore").write_text("*.py\n")

    result = run("experiment", "create", str(config), str(model))

    assert result.exit_code == 2
    assert "train.py" in result.stderr and ".epochalignore" in result.stderr
    assert fake.requests == []


def test_model_dir_over_the_limit(
    fake: FakeMaster, project, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, model = project
    (model / ".epochalignore").write_text("")  # data/ now counts: 1000 bytes
    monkeypatch.setattr(model_dir, "LIMIT", 512)

    result = run("experiment", "create", str(config), str(model))

    assert result.exit_code == 2
    assert f"model directory {model} holds 1018 B of files, more than the 512 B limit" in (
        result.stderr
    )
    assert ".epochalignore" in result.stderr
    assert "data/: 1000 B" in result.stderr
    assert fake.requests == []


def test_missing_model_dir(fake: FakeMaster, project) -> None:
    config, model = project

    result = run("experiment", "create", str(config), str(model / "nope"))

    assert result.exit_code == 2
    assert result.stderr == f"error: model directory {model / 'nope'} does not exist\n"


def test_server_refusal_is_printed_plainly(fake: FakeMaster, project) -> None:
    from tests.fakes.cli_master import error

    config, model = project
    fake.on(
        "POST",
        "/experiments",
        error(400, "invalid experiment config", ["resources.slots_per_trial: must be >= 1"]),
    )

    result = run("experiment", "create", str(config), str(model))

    assert result.exit_code == 1
    assert result.stderr == (
        "error: invalid experiment config\n  resources.slots_per_trial: must be >= 1\n"
    )
