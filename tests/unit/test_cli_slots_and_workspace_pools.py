"""`epochal slot disable|enable` and the reason `slot list` shows, `epochal job update`,
`epochal workspace set-max-slots` and `set-default-pools`: what each sends the master (a fake
one) and prints."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import cli.client
from deploy.console import app
from tests.fakes.cli_master import FakeMaster

WORKSPACE = {"id": 5, "name": "vision", "defaultComputePool": "", "defaultAuxPool": "",
             "maxSlots": None}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeMaster:
    master = FakeMaster()
    monkeypatch.setattr(cli.client, "transport_factory", master.transport)
    master.on("GET", "/workspaces", {"workspaces": [WORKSPACE]})
    return master


def run(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(app, list(args), env={"EPOCHAL_MASTER": None,
                                                      "COLUMNS": "120"})
    assert result.exit_code == code, result.output
    return result.output


def test_slot_disable_sends_the_reason_and_enable_nothing(fake: FakeMaster) -> None:
    fake.on("POST", "/agents/a 1/slots/3/disable", {"slot": {"id": "3", "enabled": False}})
    fake.on("POST", "/agents/a 1/slots/3/enable", {"slot": {"id": "3", "enabled": True}})
    assert run("slot", "disable", "a 1", "3", "--reason", "fan failing") == (
        "Disabled slot 3 of agent a 1\n")
    assert fake.body("POST", "/agents/a 1/slots/3/disable") == {"reason": "fan failing"}
    assert fake.sent("POST", "/agents/a 1/slots/3/disable")[0].url.raw_path.startswith(
        b"/api/v1/agents/a%201/")
    run("slot", "disable", "a 1", "3")
    assert fake.body("POST", "/agents/a 1/slots/3/disable") == {}
    assert run("slot", "enable", "a 1", "3") == "Enabled slot 3 of agent a 1\n"


def test_slot_list_says_why_a_slot_is_disabled(fake: FakeMaster) -> None:
    free = {"type": "TYPE_CPU", "device": {"brand": "cpu"}, "allocationId": None}
    fake.on("GET", "/agents", {"agents": [{"id": "a1"}]})
    fake.on("GET", "/agents/a1/slots", {"slots": [
        {"id": "0", "enabled": True, "disabledReason": None, **free},
        {"id": "1", "enabled": False, "disabledReason": "fan failing", **free},
        {"id": "2", "enabled": False, **free}]})  # its agent is disabled
    rows = [line for line in run("slot", "list").splitlines() if line.startswith("a1")]
    assert [" yes " in rows[0], "no: fan failing" in rows[1], " no " in rows[2]] == [True] * 3


def test_workspace_set_max_slots_and_default_pools(fake: FakeMaster) -> None:
    fake.on("PATCH", "/workspaces/5", {"workspace": {**WORKSPACE, "maxSlots": 8}},
            {"workspace": WORKSPACE},
            {"workspace": {**WORKSPACE, "defaultComputePool": "gpu"}})
    assert run("workspace", "set-max-slots", "vision", "8") == (
        "Workspace vision: at most 8 slots at once\n")
    assert fake.body("PATCH", "/workspaces/5") == {"maxSlots": 8}
    assert run("workspace", "set-max-slots", "vision", "none") == (
        "Workspace vision: no slot cap\n")
    assert fake.body("PATCH", "/workspaces/5") == {"maxSlots": None}
    assert "a number of slots" in run("workspace", "set-max-slots", "vision", "lots", code=2)
    assert run("workspace", "set-default-pools", "vision", "--compute", "gpu") == (
        "Workspace vision: compute pool gpu, aux pool default\n")
    assert fake.body("PATCH", "/workspaces/5") == {"defaultComputeResourcePool": "gpu",
                                                   "defaultAuxResourcePool": None}


def test_job_update_moves_a_job_ahead_of_or_behind_another_or_to_another_pool(
    fake: FakeMaster,
) -> None:
    fake.on("POST", "/job-queues", {})
    assert run("job", "update", "experiment-4", "--ahead-of", "experiment-2") == (
        "Updated experiment-4 ahead of experiment-2\n")
    assert fake.body("POST", "/job-queues") == {
        "updates": [{"jobId": "experiment-4", "aheadOf": "experiment-2"}]}
    assert run("job", "update", "experiment-4", "--behind-of", "experiment-3",
               "--priority", "10") == "Updated experiment-4 behind experiment-3\n"
    assert fake.body("POST", "/job-queues") == {"updates": [
        {"jobId": "experiment-4", "behindOf": "experiment-3", "priority": 10}]}
    both = run("job", "update", "experiment-4", "--ahead-of", "experiment-2", "--behind-of",
               "experiment-3", code=2)
    assert "not both" in both
    assert "nothing to change" in run("job", "update", "experiment-4", code=2)
    assert run("job", "update", "experiment-4", "--resource-pool", "gpu") == (
        "Updated experiment-4 into resource pool gpu\n")
    assert fake.body("POST", "/job-queues") == {
        "updates": [{"jobId": "experiment-4", "resourcePool": "gpu"}]}
