"""Issue 37 item 10: `epochal model alias set|delete|list` and the aliases `model describe` shows
(as a column at 80 and 100 columns, and in --json), against a fake master."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

import cli.client
from deploy.console import app
from tests.fakes.cli_master import FakeMaster, checkpoint, error
from tests.unit.test_cli_width import UUID, WIDTHS, assert_fits

MODEL = {"id": 3, "name": "digits", "description": "a classifier", "notes": "", "metadata": {},
         "labels": ["cv"], "creationTime": "2025-01-02T10:00:00+00:00",
         "lastUpdatedTime": "2025-01-02T11:00:00+00:00", "numVersions": 2, "username": "admin",
         "userId": 1, "archived": False, "workspaceId": 1, "latestVersion": 2}
ALIASES = [{"alias": "champion", "version": 1, "username": "admin",
            "lastUpdatedTime": "2025-01-02T11:00:00+00:00"},
           {"alias": "production", "version": 2, "username": "admin",
            "lastUpdatedTime": "2025-01-02T11:00:00+00:00"}]


def version(number: int) -> dict[str, Any]:
    return {"id": number, "version": number, "model": MODEL, "name": "", "comment": "",
            "notes": "", "metadata": {}, "labels": [], "username": "admin", "userId": 1,
            "checkpoint": checkpoint(UUID.format(number), 12, 100 * number, 0.3),
            "creationTime": "2025-01-02T10:00:00+00:00",
            "lastUpdatedTime": "2025-01-02T10:00:00+00:00"}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeMaster:
    master = FakeMaster()
    monkeypatch.setattr(cli.client, "transport_factory", master.transport)
    master.on("GET", "/models/digits", {"model": MODEL})
    master.on("GET", "/models/digits/versions", {
        "model": MODEL, "modelVersions": [version(1), version(2)],
        "pagination": {"offset": 0, "limit": 2, "total": 2}})
    master.on("GET", "/models/digits/aliases", {"aliases": ALIASES})
    return master


def run(*args: str, width: int = 100, code: int = 0) -> str:
    result = CliRunner().invoke(app, list(args),
                                env={"COLUMNS": str(width), "EPOCHAL_MASTER": None})
    assert result.exit_code == code, result.output
    return result.output


def test_alias_set_points_the_alias_at_the_version(fake: FakeMaster) -> None:
    fake.on("PUT", "/models/digits/aliases/production", {"aliases": ALIASES})
    out = run("model", "alias", "set", "digits", "production", "2")
    assert "Alias production of model digits now points at version 2" in out
    assert fake.body("PUT", "/models/digits/aliases/production") == {"version": 2}
    answer = json.loads(run("model", "alias", "set", "digits", "production", "2", "--json"))
    assert answer == {"aliases": ALIASES}


def test_alias_delete_and_a_refusal_named_by_the_master(fake: FakeMaster) -> None:
    fake.on("DELETE", "/models/digits/aliases/champion", {"aliases": ALIASES[1:]})
    assert "Deleted alias champion of model digits" in run("model", "alias", "delete", "digits",
                                                           "champion")
    assert len(fake.sent("DELETE", "/models/digits/aliases/champion")) == 1
    fake.on("PUT", "/models/digits/aliases/latest", error(
        400, "bad alias", ["alias: 'latest' and 'v<number>' are reserved (they name versions),"
                           " got 'latest'"]))
    out = run("model", "alias", "set", "digits", "latest", "1", code=1)
    assert "alias: 'latest'" in out and "Traceback" not in out


@pytest.mark.parametrize("width", WIDTHS)
def test_describe_shows_each_versions_aliases_and_fits(fake: FakeMaster, width: int) -> None:
    lines = assert_fits(run("model", "describe", "digits", width=width), width)
    rows = {line.split()[0]: line for line in lines if line.split()[:1] in (["1"], ["2"])}
    assert "champion" in rows["1"] and "production" not in rows["1"]
    assert "production" in rows["2"] and "champion" not in rows["2"]
    assert any(line.startswith("Latest version") and line.rstrip().endswith("2")
               for line in lines)


def test_describe_json_and_alias_list(fake: FakeMaster) -> None:
    answer = json.loads(run("model", "describe", "digits", "--json"))
    assert answer["aliases"] == ALIASES and len(answer["modelVersions"]) == 2
    lines = assert_fits(run("model", "alias", "list", "digits", width=80), 80)
    assert [line.split()[:2] for line in lines if line.startswith(("champion", "production"))] \
        == [["champion", "1"], ["production", "2"]]
