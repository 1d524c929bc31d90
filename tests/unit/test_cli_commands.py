"""`epochal trial/checkpoint/agent/cluster/master` commands."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

import cli.agent
import cli.client
from deploy.console import app
from tests.fakes.cli_master import (
    CHECKPOINTS,
    FakeMaster,
    experiment,
    log,
    ndjson,
    trial,
    unreachable,
)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeMaster:
    master = FakeMaster()
    monkeypatch.setattr(cli.client, "transport_factory", master.transport)
    return master


def run(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "220", "EPOCHAL_MASTER": None})


# -- trial ------------------------------------------------------------------------------------


def test_trial_describe(fake: FakeMaster) -> None:
    t = trial(12, 0.3, 0.25)
    t["restarts"] = 2
    fake.on("GET", "/trials/12", {"trial": t})
    fake.on("GET", "/trials/12/checkpoints", {"checkpoints": CHECKPOINTS[1:]})
    fake.on("GET", "/experiments/4", {"experiment": experiment()})

    result = run("trial", "describe", "12")

    assert result.exit_code == 0, result.output
    out = result.stdout
    fields = {
        line.split(maxsplit=1)[0]: line.split(maxsplit=1)[1].strip()
        for line in out.splitlines()
        if line and not line.startswith(" ") and len(line.split(maxsplit=1)) == 2
    }
    assert fields["State"] == "COMPLETED"
    assert fields["Restarts"] == "2"
    assert "lr=0.12" in out and "optimizer.momentum=0.9" in out
    assert "step 300: validation_loss=0.3, accuracy=0.9" in out  # latest validation
    assert "step 200: validation_loss=0.25, accuracy=0.9" in out  # best validation
    assert "c-12-200" in out and "c-12-300" in out
    assert "2.1 KiB" in out  # checkpoint size


def test_trial_describe_json(fake: FakeMaster) -> None:
    t = trial(12, 0.3, 0.25)
    fake.on("GET", "/trials/12", {"trial": t})
    fake.on("GET", "/trials/12/checkpoints", {"checkpoints": []})

    result = run("trial", "describe", "12", "--json")

    assert json.loads(result.stdout) == {"trial": t, "checkpoints": []}


def test_trial_logs_unprefixed(fake: FakeMaster) -> None:
    fake.on("GET", "/trials/12/logs", ndjson([log(1, 12, "a\n"), log(2, 12, "b")]))

    result = run("trial", "logs", "12", "--follow")

    assert result.stdout == "a\nb\n"
    assert fake.sent("GET", "/trials/12/logs")[0].url.params["follow"] == "true"


def test_trial_logs_json_lines(fake: FakeMaster) -> None:
    fake.on("GET", "/trials/12/logs", ndjson([log(1, 12, "a")]))

    result = run("trial", "logs", "12", "--json")

    assert [json.loads(line) for line in result.stdout.splitlines()] == [log(1, 12, "a")]
    assert fake.sent("GET", "/trials/12/logs")[0].url.params["follow"] == "false"


# -- checkpoint -------------------------------------------------------------------------------


def test_checkpoint_list(fake: FakeMaster) -> None:
    fake.on("GET", "/experiments/4/checkpoints", {"checkpoints": CHECKPOINTS})
    fake.on("GET", "/experiments/4", {"experiment": experiment()})

    result = run("checkpoint", "list", "4")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split()[:7] == [
        "UUID",
        "Trial",
        "Steps",
        "State",
        "Size",
        "Reported",
        "validation_loss",
    ]
    row = lines[2].split()
    assert row[:6] == ["c-11-300", "11", "300", "COMPLETED", "2.1", "KiB"]
    assert row[-1] == "0.5"


def test_checkpoint_list_json(fake: FakeMaster) -> None:
    fake.on("GET", "/experiments/4/checkpoints", {"checkpoints": CHECKPOINTS})

    result = run("checkpoint", "list", "4", "--json")

    assert json.loads(result.stdout)["checkpoints"] == CHECKPOINTS


# -- agent ------------------------------------------------------------------------------------


AGENTS = {
    "agents": [
        {
            "id": "local-agent",
            "resourcePool": "default",
            "slots": {
                "0": {"id": "0", "type": "TYPE_CPU", "device": {}},
                "1": {"id": "1", "type": "TYPE_CPU", "device": {}},
            },
            "registeredTime": "2025-01-02T10:00:00+00:00",
            "lastSeen": "2025-01-02T10:05:00+00:00",
            "enabled": True,
            "alive": True,
        }
    ]
}


def test_agent_list(fake: FakeMaster) -> None:
    fake.on("GET", "/agents", AGENTS)

    result = run("agent", "list")

    assert result.exit_code == 0, result.output
    row = result.stdout.splitlines()[2].split()
    assert row[:6] == ["local-agent", "default", "2", "(CPU)", "yes", "yes"]


def test_agent_list_json(fake: FakeMaster) -> None:
    fake.on("GET", "/agents", AGENTS)

    assert json.loads(run("agent", "list", "--json").stdout) == AGENTS


def test_agent_run_forwards_options(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(cli.agent, "run_agent", lambda argv: seen.append(argv))
    monkeypatch.delenv("EPOCHAL_TEMPORAL_ADDRESS", raising=False)

    result = run(
        "-m",
        "http://m:8080",
        "agent",
        "run",
        "--namespace",
        "epochal",
        "--slots",
        "3",
        "--work-dir",
        "/w",
        "--agent-id",
        "a1",
    )

    assert result.exit_code == 0, result.output
    assert seen == [
        [
            "--master",
            "http://m:8080",
            "--temporal",
            "127.0.0.1:7233",
            "--pool",
            "default",
            "--namespace",
            "epochal",
            "--slots",
            "3",
            "--work-dir",
            "/w",
            "--agent-id",
            "a1",
        ]
    ]


# -- cluster ----------------------------------------------------------------------------------


@dataclass
class FakeInfo:
    api_url: str = "http://127.0.0.1:8080"
    dashboard_url: str = "http://127.0.0.1:8080/"
    temporal_address: str = "127.0.0.1:7233"
    temporal_ui_url: str | None = "http://127.0.0.1:8233"
    db_url: str = "postgresql://127.0.0.1:54329/epochal"
    state_dir: Path = Path("/state")
    admin_password: str = "first-password"
    cluster_token: str = "cluster-secret"
    s3_endpoint: str | None = None
    s3_access_key: str = "s3-key"
    s3_secret_key: str = "s3-secret"


@dataclass
class FakePart:
    name: str
    pid: int | None
    running: bool
    answering: bool
    address: str
    log_file: Path | None
    external: bool = False


@dataclass
class FakeStatus:
    info: FakeInfo
    parts: list[FakePart] = field(default_factory=list)

    @property
    def all_answering(self) -> bool:
        return all(p.answering for p in self.parts)


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> dict:
    from deploy import local_cluster

    calls: dict = {}

    def up(settings, report=None):
        calls["up"] = settings
        if report:
            report("postgres: somewhere")
        return FakeInfo()

    def log_in(url, username, password):
        calls["login"] = (url, username, password)
        return "token"

    monkeypatch.setattr("cli.user.log_in", log_in)

    def down(settings):
        calls["down"] = settings
        return ["agent", "master"]

    def status(settings):
        calls["status"] = settings
        return FakeStatus(
            FakeInfo(),
            [
                FakePart("postgres", 10, True, True, "127.0.0.1:54329", Path("/l/pg.log")),
                FakePart("master", None, False, False, "http://127.0.0.1:8080", None),
            ],
        )

    monkeypatch.setattr(local_cluster, "up", up)
    monkeypatch.setattr(local_cluster, "down", down)
    monkeypatch.setattr(local_cluster, "status", status)
    return calls


def test_cluster_up_passes_only_given_options_and_prints_addresses(cluster, tmp_path) -> None:
    result = run(
        "cluster", "up", "--state-dir", str(tmp_path), "--api-port", "9090", "--slots", "2"
    )

    assert result.exit_code == 0, result.output
    s = cluster["up"]
    assert s.state_dir == tmp_path
    assert (s.api_port, s.agent_slots, s.temporal_port) == (9090, 2, 7233)
    assert "http://127.0.0.1:8080/" in result.stdout  # dashboard
    assert "http://127.0.0.1:8233" in result.stdout  # Temporal UI
    assert "127.0.0.1:7233" in result.stdout
    assert "starting postgres" in result.stderr
    # The CLI logs itself in as admin and says how a person logs in; the token never shows.
    assert cluster["login"] == ("http://127.0.0.1:8080", "admin", "first-password")
    assert "admin / first-password" in result.stdout
    assert "cluster-secret" not in result.stdout
    assert s.s3 is False and "/state/checkpoints" in result.stdout


def test_cluster_up_with_s3_names_the_checkpoint_bucket_and_hides_its_keys(
    cluster, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    from deploy import local_cluster

    def up(settings, report=None):
        cluster["up"] = settings
        return FakeInfo(s3_endpoint="http://127.0.0.1:18333")

    monkeypatch.setattr(local_cluster, "up", up)
    result = run("cluster", "up", "--state-dir", str(tmp_path), "--s3", "--s3-port", "18333")

    assert result.exit_code == 0, result.output
    assert (cluster["up"].s3, cluster["up"].s3_port) == (True, 18333)
    assert "s3://checkpoints at http://127.0.0.1:18333" in result.stdout
    assert "s3-secret" not in result.stdout and "s3-key" not in result.stdout


def test_cluster_up_on_an_address_of_this_machine_says_how_agents_join(
    cluster, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    from deploy import local_cluster

    def up(settings, report=None):
        cluster["up"] = settings
        return FakeInfo(api_url="http://127.0.0.2:8080", temporal_address="127.0.0.2:7233")

    monkeypatch.setattr(local_cluster, "up", up)
    result = run("cluster", "up", "--state-dir", str(tmp_path), "--host", "127.0.0.2")

    assert result.exit_code == 0, result.output
    assert cluster["up"].host == "127.0.0.2"
    assert ("epochal agent run --master http://127.0.0.2:8080 --temporal 127.0.0.2:7233"
            in " ".join(result.stdout.split()))


@pytest.mark.parametrize(("host", "expected"), [
    ("0.0.0.0", "0.0.0.0 is no address to reach"),
    ("192.0.2.77", "192.0.2.77 is not an address of this machine"),
    ("master.example", "must be an IP address of this machine, got 'master.example'"),
])
def test_cluster_up_refuses_a_host_agents_cannot_reach(cluster, tmp_path, host: str,
                                                       expected: str) -> None:
    result = run("cluster", "up", "--state-dir", str(tmp_path), "--host", host)
    assert result.exit_code == 2
    assert expected in " ".join(result.stderr.split()) and "--host" in result.stderr
    assert "up" not in cluster


def test_cluster_up_failure_is_a_plain_error(
    cluster, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    from deploy import local_cluster

    def fail(settings, report=None):
        raise local_cluster.ClusterError("master: port 8080 is in use\nlog file: /x.log")

    monkeypatch.setattr(local_cluster, "up", fail)

    result = run("cluster", "up", "--state-dir", str(tmp_path))

    assert result.exit_code == 1
    assert result.stderr == "error: master: port 8080 is in use\nlog file: /x.log\n"


def test_cluster_down(cluster, tmp_path) -> None:
    result = run("cluster", "down", "--state-dir", str(tmp_path))

    assert result.exit_code == 0
    assert result.stdout == "Stopped agent, master.\n"


def test_cluster_status_table_and_exit_code(cluster, tmp_path) -> None:
    result = run("cluster", "status", "--state-dir", str(tmp_path))

    assert result.exit_code == 1  # the master does not answer
    lines = result.stdout.splitlines()
    assert lines[2].split()[:5] == ["postgres", "10", "yes", "yes", "127.0.0.1:54329"]
    assert lines[3].split()[:4] == ["master", "-", "no", "no"]
    assert "Logs: /l" in result.stdout


def test_cluster_status_json(cluster, tmp_path) -> None:
    result = run("cluster", "status", "--state-dir", str(tmp_path), "--json")

    data = json.loads(result.stdout)
    assert data["info"]["api_url"] == "http://127.0.0.1:8080"
    assert data["parts"][0]["log_file"] == "/l/pg.log"
    assert data["allAnswering"] is False


def test_cluster_status_of_a_named_master_is_that_masters(
    cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """-m or EPOCHAL_MASTER naming another master: its answer and agents, not this machine's
    local cluster (which `status` used to report whatever the user named)."""
    fake = (FakeMaster()
            .on("GET", "/master", {"clusterName": "team", "version": "1.2.3"})
            .on("GET", "/agents", {"agents": [{"id": "gpu-1", "enabled": True,
                                               "slots": {"0": {}, "1": {}}}]}))
    monkeypatch.setattr(cli.client, "transport_factory", fake.transport)
    monkeypatch.setenv("EPOCHAL_STATE_DIR", "")  # the local cluster's own, if any
    monkeypatch.setenv("HOME", str(tmp_path))  # no local cluster there

    result = run("-m", "http://team-master:8080", "cluster", "status")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[2].split()[:3] == ["master", "yes", "http://team-master:8080"]
    assert lines[3].split()[:4] == ["agent", "yes", "gpu-1", "(2"]
    assert "Cluster: team (Epochal 1.2.3)" in result.stdout
    assert "status" not in cluster  # the local cluster's status was not asked

    data = json.loads(run("-m", "http://team-master:8080", "cluster", "status", "--json").stdout)
    assert data["answering"] is True and data["agents"] == [
        {"id": "gpu-1", "slots": 2, "enabled": True}]

    monkeypatch.setattr(cli.client, "transport_factory",
                        lambda: httpx.MockTransport(unreachable))
    gone = run("-m", "http://team-master:8080", "cluster", "status")
    assert gone.exit_code == 1
    assert gone.stdout.splitlines()[2].split()[:2] == ["master", "no"]
    assert "cannot reach the master at http://team-master:8080" in gone.stdout


def test_master_run_calls_deploy_master(monkeypatch: pytest.MonkeyPatch) -> None:
    import deploy.master

    called: list[bool] = []
    monkeypatch.setattr(deploy.master, "main", lambda: called.append(True))

    result = run("master", "run")

    assert result.exit_code == 0, result.output
    assert called == [True]


# -- rendering --------------------------------------------------------------------------------


def test_narrow_terminal_never_cuts_uuids_or_states(fake: FakeMaster) -> None:
    """Issue 37 item 16: a table too wide for the terminal gives way in its time and metric
    columns (cut short with an ellipsis), not in its uuids and states, and never wraps."""
    fake.on("GET", "/experiments/4/checkpoints", {"checkpoints": CHECKPOINTS})
    fake.on("GET", "/experiments/4", {"experiment": experiment()})

    result = CliRunner().invoke(
        app, ["checkpoint", "list", "4"], env={"COLUMNS": "60", "EPOCHAL_MASTER": None}
    )

    assert "c-12-200" in result.stdout and "COMPLETED" in result.stdout
    lines = result.stdout.splitlines()
    assert all(len(line) <= 60 for line in lines)
    assert len([line for line in lines if line.startswith("c-")]) == 3  # one line a row
    assert "…" in lines[0]  # the metric's name, cut short


def test_times_are_local_and_short() -> None:
    from datetime import UTC, datetime, timedelta

    from cli.render import when

    local = datetime(2025, 6, 1, 12, 30, 15).astimezone()
    iso = local.astimezone(UTC).isoformat()
    assert when(iso) == "2025-06-01 12:30:15"
    # Issue 37 item 16: a table's time has its date unless it is today's.
    assert when(iso, compact=True, now=local + timedelta(hours=1)) == "12:30"
    assert when(iso, compact=True, now=local + timedelta(days=3)) == "2025-06-01 12:30"
    assert when(iso, compact=True, now=local + timedelta(days=400)) == "2025-06-01 12:30"
    assert when(None) == "-"
