"""End to end, as a user works: `epochal cluster up`, then experiments driven with the CLI.

The cluster runs the real master and agent processes; it uses the session's PostgreSQL (a fresh
database) and Temporal dev server (its own namespace) through EPOCHAL_DB_URL and
EPOCHAL_TEMPORAL_ADDRESS, the way a cluster on external servers is configured.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil
import pytest
import yaml

from agent_worker.sandbox import RUN_ID_BASE
from common.processes import free_port
from common.states import TERMINAL_STATES
from tests.e2e.cluster import DIGITS, EPOCHAL, Cluster, created_id, shared_servers_cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

@pytest.fixture(scope="module")
def cluster(postgres_url: str, temporal_address: str) -> Iterator[Cluster]:
    with shared_servers_cluster(postgres_url, temporal_address, "e2e", "--slots", "2") as c:
        assert c.up is not None and f"{c.url}/" in c.up.stdout  # the dashboard address
        yield c


def test_grid_search_runs_to_completion(cluster: Cluster) -> None:
    result = cluster.run(
        "experiment", "create", "examples/digits/grid.yaml", "examples/digits", "--follow"
    )
    experiment_id = created_id(result.stdout)
    assert "Best trial:" in result.stdout

    trials = cluster.json("experiment", "describe", str(experiment_id))["trials"]
    assert len(trials) == 6
    assert {t["state"] for t in trials} == {"STATE_COMPLETED"}
    assert all(t["bestValidation"]["metrics"]["avgMetrics"]["accuracy"] > 0 for t in trials)
    assert {(t["hparams"]["learning_rate"], t["hparams"]["hidden_size"]) for t in trials} == {
        (lr, h) for lr in (0.001, 0.01, 0.1) for h in (16, 64)
    }

    checkpoints = cluster.json("checkpoint", "list", str(experiment_id))["checkpoints"]
    kept = [c for c in checkpoints if c["state"] == "STATE_COMPLETED"]
    assert {c["training"]["trialId"] for c in kept} == {t["id"] for t in trials}
    assert all(Path(c["storagePath"]).is_dir() for c in kept)
    deleted = [c for c in checkpoints if c["state"] == "STATE_DELETED"]
    assert deleted and not any(Path(c["storagePath"]).exists() for c in deleted)

    logs = cluster.run("trial", "logs", str(trials[0]["id"])).stdout
    assert "validation" in logs.lower()
    listed = cluster.run("experiment", "list").stdout
    assert "digits-grid" in listed


def long_single_config(tmp_path: Path) -> Path:
    config = yaml.safe_load((DIGITS / "single.yaml").read_text())
    config["name"] = "digits-long"
    config["searcher"]["max_length"] = {"batches": 2_000_000}
    config["hyperparameters"]["validation_period"] = 100_000
    path = tmp_path / "long.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def trial_of(cluster: Cluster, experiment_id: int) -> dict[str, Any]:
    """The experiment's first trial; {} before it has one (its workflow creates it a moment
    after the experiment, later when that first write is retried)."""
    trials = cluster.trials(experiment_id)
    return trials[0] if trials else {}


def experiment_state(cluster: Cluster, experiment_id: int) -> str:
    return str(cluster.experiment(experiment_id)["state"])


def training_processes(cluster: Cluster) -> list[psutil.Process]:
    work = str(cluster.state_dir / "agent")
    found = []
    for proc in psutil.process_iter(["cmdline", "cwd", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and (proc.info["cwd"] or "").startswith(
                work
            ):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_pause_activate_and_kill(cluster: Cluster, tmp_path: Path) -> None:
    result = cluster.run(
        "experiment", "create", str(long_single_config(tmp_path)), "examples/digits"
    )
    experiment_id = created_id(result.stdout)
    wait_for(
        lambda: trial_of(cluster, experiment_id).get("totalBatchesProcessed", 0) > 0,
        timeout=60, what="the first training metrics",
    )

    cluster.run("experiment", "pause", str(experiment_id))
    wait_for(
        lambda: trial_of(cluster, experiment_id)["state"] == "STATE_PAUSED",
        timeout=60, what="the trial to pause",
    )
    assert experiment_state(cluster, experiment_id) == "STATE_PAUSED"
    paused = trial_of(cluster, experiment_id)
    assert paused["latestCheckpointUuid"], "a preempted trial checkpoints before it stops"
    wait_for(lambda: not training_processes(cluster), 60, "the training process to exit")

    cluster.run("experiment", "activate", str(experiment_id))
    wait_for(
        lambda: (
            trial_of(cluster, experiment_id)["runId"] == 2
            and trial_of(cluster, experiment_id)["state"] == "STATE_RUNNING"
        ),
        timeout=60, what="the trial to run again",
    )
    logs = wait_for(
        lambda: (
            "resumed from checkpoint"
            in (out := cluster.run("trial", "logs", str(paused["id"])).stdout)
            and out
        ),
        timeout=60, what="the resumed run's log line",
    )
    assert paused["latestCheckpointUuid"] in logs

    cluster.run("experiment", "kill", str(experiment_id))
    wait_for(
        lambda: experiment_state(cluster, experiment_id) == "STATE_CANCELED",
        timeout=30,
        what="the experiment to be canceled",
    )
    assert trial_of(cluster, experiment_id)["state"] == "STATE_CANCELED"
    wait_for(
        lambda: not training_processes(cluster),
        timeout=15,
        what="the killed training process to be gone",
    )
    denied = cluster.run("experiment", "activate", str(experiment_id), check=False)
    assert denied.returncode == 1
    assert "CANCELED" in denied.stderr

    # The ended experiment's lifecycle, through the CLI against the real master.
    eid = str(experiment_id)
    cluster.run("experiment", "set", "name", eid, "digits-killed")
    cluster.run("experiment", "label", "add", eid, "killed", "e2e")
    shown = cluster.json("experiment", "describe", eid)["experiment"]
    assert (shown["name"], shown["labels"]) == ("digits-killed", ["e2e", "killed"])
    assert "searcher:" in cluster.run("experiment", "config", eid).stdout
    cluster.run("experiment", "download-model-def", eid, str(tmp_path / "model"))
    assert (tmp_path / "model" / "train.py").read_bytes() == (DIGITS / "train.py").read_bytes()
    cluster.run("experiment", "archive", eid)
    assert "digits-killed" not in cluster.run("experiment", "list").stdout
    assert "digits-killed" in cluster.run("experiment", "list", "--all").stdout
    cluster.run("experiment", "unarchive", eid)
    cluster.run("experiment", "delete", eid, "--yes")
    gone = cluster.run("experiment", "describe", eid, check=False)
    assert gone.returncode == 1 and "not found" in gone.stderr


def test_bad_input_is_refused_before_anything_is_stored(cluster: Cluster, tmp_path: Path) -> None:
    before = cluster.json("experiment", "list", "--all")
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("name: [unclosed\n")
    result = cluster.run("experiment", "create", str(bad_yaml), "examples/digits", check=False)
    assert result.returncode == 2
    assert "bad.yaml" in result.stderr and "Traceback" not in result.stderr

    typo = yaml.safe_load((DIGITS / "single.yaml").read_text())
    typo["searcher"]["metirc"] = typo["searcher"].pop("metric")
    typo_path = tmp_path / "typo.yaml"
    typo_path.write_text(yaml.safe_dump(typo))
    result = cluster.run("experiment", "create", str(typo_path), "examples/digits", check=False)
    assert result.returncode == 2
    assert 'did you mean "metric"' in result.stderr

    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    result = cluster.run(
        "experiment", "create", "examples/digits/single.yaml", str(empty_dir), check=False
    )
    assert result.returncode == 2
    assert "train.py" in result.stderr

    after = cluster.json("experiment", "list", "--all")
    assert len(after["experiments"]) == len(before["experiments"])

    env = {**cluster.env, "EPOCHAL_MASTER": f"http://127.0.0.1:{free_port()}"}
    result = subprocess.run(
        [*EPOCHAL, "experiment", "list"], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert "cannot reach the master" in result.stderr and "Traceback" not in result.stderr


def test_a_trial_that_raises_says_which_exception_and_ships_its_traceback_as_errors(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The traceback's lines are ERROR lines (the dashboard's errors filter and its banner show
    them), and the run's failure names the exception, not only its exit code."""
    (tmp_path / "train.py").write_text(
        "print('loading', flush=True)\n"
        "def fit(lr):\n    raise ValueError(f'bad lr {lr}')\n"
        "fit(7.0)\n")
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "name": "raises", "entrypoint": "python3 train.py", "max_restarts": 0,
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}}}))
    experiment_id = created_id(cluster.run("experiment", "create", str(config),
                                           str(tmp_path)).stdout)
    wait_for(lambda: cluster.experiment(experiment_id)["state"] == "STATE_ERROR", 120,
             "the experiment to end in ERROR")
    [trial] = cluster.trials(experiment_id)
    logs = cluster.trial_logs(trial["id"])
    levels = {line["log"].strip(): line["level"] for line in logs}
    assert levels["loading"] == "LOG_LEVEL_INFO"
    assert levels["Traceback (most recent call last):"] == "LOG_LEVEL_ERROR"
    assert levels["ValueError: bad lr 7.0"] == "LOG_LEVEL_ERROR"
    assert any("exited with code 1 (raised ValueError: bad lr 7.0)" in line["log"]
               and line["level"] == "LOG_LEVEL_ERROR" for line in logs), logs


# examples/digits/adaptive.yaml's search at a fifth of its length: its rungs at 250, 1000 and
# 4000 batches, each a validation (every 250 batches), so a fifth of the validations a trial
# waits on.
SHORT_ASHA_BATCHES = 4000


def short_adaptive_config(tmp_path: Path) -> Path:
    config = yaml.safe_load((DIGITS / "adaptive.yaml").read_text())
    config["searcher"]["max_length"] = {"batches": SHORT_ASHA_BATCHES}
    path = tmp_path / "adaptive.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_adaptive_asha_stops_trials_early_and_trains_the_best_to_the_end(
    cluster: Cluster, tmp_path: Path
) -> None:
    full = SHORT_ASHA_BATCHES
    result = cluster.run(
        "experiment", "create", str(short_adaptive_config(tmp_path)), "examples/digits",
        "--follow", timeout=300,
    )
    experiment_id = created_id(result.stdout)
    described = cluster.json("experiment", "describe", str(experiment_id))
    trials = described["trials"]
    assert len(trials) == 16
    assert {t["state"] for t in trials} == {"STATE_COMPLETED"}
    stopped = [t for t in trials if (t["searcherStatus"] or "").startswith("stopped early")]
    assert stopped, "adaptive ASHA stopped no trial early"
    assert all(t["totalBatchesProcessed"] < full for t in stopped)
    best = next(t for t in trials if t["id"] == described["experiment"]["bestTrialId"])
    assert best["totalBatchesProcessed"] == full  # the best was promoted to the full length
    assert sum(t["totalBatchesProcessed"] for t in trials) < 16 * full / 2
    shown = cluster.run("experiment", "describe", str(experiment_id)).stdout
    assert "stopped early at rung 0" in shown


def test_users_log_in_and_may_not_touch_others_experiments(
    cluster: Cluster, tmp_path: Path
) -> None:
    assert "admin /" in (cluster.up.stdout if cluster.up else "")  # says how to log in
    name = f"bob{free_port()}"
    created = cluster.run("user", "create", name, env_extra={"EPOCHAL_PASSWORD": "bobs-password"})
    assert f"Created user {name}" in created.stdout
    assert name in cluster.run("user", "list").stdout
    assert "'admin' (admin)" in cluster.run("user", "whoami").stdout

    bob = {"EPOCHAL_AUTH_FILE": str(tmp_path / "bob.json")}
    refused = cluster.run("experiment", "list", check=False, env_extra=bob)
    assert refused.returncode == 1 and "not logged in" in refused.stderr
    wrong = cluster.run("user", "login", name, check=False,
                        env_extra={**bob, "EPOCHAL_PASSWORD": "not-it-at-all"})
    assert wrong.returncode == 1 and "invalid username or password" in wrong.stderr
    cluster.run("user", "login", name, env_extra={**bob, "EPOCHAL_PASSWORD": "bobs-password"})
    assert f"'{name}'" in cluster.run("user", "whoami", env_extra=bob).stdout

    admins = created_id(cluster.run(
        "experiment", "create", str(long_single_config(tmp_path)), str(DIGITS)).stdout)
    kill = cluster.run("experiment", "kill", str(admins), check=False, env_extra=bob)
    assert kill.returncode == 1 and "belongs to admin" in kill.stderr
    cluster.run("experiment", "kill", str(admins))

    cluster.run("user", "logout", env_extra=bob)
    after = cluster.run("user", "whoami", check=False, env_extra=bob)
    assert after.returncode == 1 and "not logged in" in after.stderr


VICTIM_PY = """
import json, os, socket, sys, time
# Its checkpoint storage: a directory of its own with a file the trial made readable by all,
# and one it wrote as code does (no mode given); and its /dev/shm.
storage = json.load(open(os.environ["EPOCHAL_TRIAL_INFO"]))["checkpoint_storage"]["host_path"]
mine = os.path.join(storage, "victim-" + sys.argv[1])
os.makedirs(mine)
with open(os.path.join(mine, "weights.bin"), "w") as f:
    f.write(sys.argv[1])
with open(os.path.join(mine, "public.txt"), "w") as f:
    f.write(sys.argv[1])
os.chmod(os.path.join(mine, "public.txt"), 0o644)
with open("/dev/shm/victim-" + sys.argv[1], "w") as f:
    f.write(sys.argv[1])
# A port of its own, as gloo's pair connections or a debug server open one: not one it was given.
server = socket.create_server(("127.0.0.1", 0))
print("IDENTITY " + json.dumps({"uid": os.getuid(), "port": server.getsockname()[1]}),
      flush=True)
with open("marker.txt", "w") as f:  # what the test waits for: all of the above is done
    f.write(sys.argv[1])
time.sleep(600)
"""

# What a hostile user's trial tries: every secret of the cluster it might reach, the other
# trial's files, the database without its password, Temporal (which asks for nothing), and
# registering an agent of its own.
ATTACKER_PY = """
import asyncio, glob, json, os, socket, urllib.error, urllib.request
import asyncpg

def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError as err:
        return f"<{type(err).__name__}>"

state = os.environ["STATE_DIR"]
own = os.path.dirname(os.path.dirname(os.environ["EPOCHAL_TRIAL_INFO"]))  # its run's directory
found = {"uid": os.getuid()}
found["secrets"] = read(os.path.join(state, "secrets.json"))
found["cli_login"] = read(os.path.join(state, "auth.json"))
found["other_runs"] = [read(p) for p in glob.glob(os.path.join(state, "agent/trials/**"),
                                                  recursive=True)
                       if os.path.isfile(p) and not p.startswith(own + os.sep)]
found["processes"] = {pid: read(f"/proc/{pid}/environ") for pid in os.listdir("/proc")
                      if pid.isdigit()}
home = os.environ["AGENT_HOME"]
found["agent_home"] = sorted(os.listdir(home)) if os.path.isdir(home) else []

async def database():
    try:
        await asyncpg.connect(host="127.0.0.1", port=int(os.environ["PG_PORT"]),
                              user="postgres", database="postgres", timeout=10)
        return "connected"
    except Exception as err:
        return type(err).__name__
found["postgres"] = asyncio.run(database())
# The victim's checkpoint storage (it names its directory after its marker, so: any entry).
storage = json.load(open(os.environ["EPOCHAL_TRIAL_INFO"]))["checkpoint_storage"]["host_path"]
victims = glob.glob(os.path.join(storage, "victim-*"))
found["victim_files"] = [read(os.path.join(d, name)) for d in victims
                         for name in ("weights.bin", "public.txt")]
def written(directory):
    try:
        with open(os.path.join(directory, "sitecustomize.py"), "w") as f:
            f.write("print('mallory was here')")
        return "written"
    except OSError as err:
        return type(err).__name__
found["victim_dir_written"] = [written(d) for d in victims]
found["victim_dir_renamed"] = []
for d in victims:
    try:
        os.rename(d, d + "-gone")
        found["victim_dir_renamed"].append("renamed")
    except OSError as err:
        found["victim_dir_renamed"].append(type(err).__name__)
found["shm"] = sorted(os.listdir("/dev/shm"))
def connect(port):
    try:
        socket.create_connection(("127.0.0.1", int(port)), timeout=10).close()
        return "connected"
    except OSError as err:
        return type(err).__name__
found["board"] = connect(os.environ["BOARD_PORT"])
found["victim_port"] = connect(os.environ["VICTIM_PORT"])
host, port = os.environ["TEMPORAL"].rsplit(":", 1)
try:
    socket.create_connection((host, int(port)), timeout=10).close()
    found["temporal"] = "connected"
except OSError as err:
    found["temporal"] = type(err).__name__

token = json.load(open(os.environ["EPOCHAL_TRIAL_INFO"]))["session_token"]
body = json.dumps({"resourcePool": "default", "bootId": "x", "slots": [
    {"id": i, "type": "cpu"} for i in range(64)]}).encode()
request = urllib.request.Request(
    os.environ["EPOCHAL_MASTER"] + "/api/v1/agents/forged-agent", data=body, method="PUT",
    headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
try:
    found["register_agent"] = urllib.request.urlopen(request, timeout=10).status
except urllib.error.HTTPError as err:
    found["register_agent"] = err.code
print("FOUND " + json.dumps(found), flush=True)
"""


def _listening() -> set[int]:
    """The TCP ports something on this host listens on."""
    return {int(getattr(conn.laddr, "port", 0)) for conn in psutil.net_connections(kind="tcp")
            if conn.status == psutil.CONN_LISTEN}


def _service_port(task_id: str) -> int | None:
    """The port the task's TensorBoard listens on, from its command line (`--port P` beside its
    proxy prefix): other clusters' runs on this host may have the same uid."""
    for process in psutil.process_iter(["cmdline"]):
        argv = process.info["cmdline"] or []
        if "harness.tensorboard" in argv and any(task_id in arg for arg in argv):
            return int(argv[argv.index("--port") + 1])
    return None


def test_a_users_trial_cannot_reach_the_clusters_secrets_or_other_trials(
    cluster: Cluster, postgres_url: str, tmp_path: Path
) -> None:
    marker = f"victim-{free_port()}-{tmp_path.name}"
    victim_dir, attacker_dir = tmp_path / "victim", tmp_path / "attacker"
    for directory, script in ((victim_dir, VICTIM_PY), (attacker_dir, ATTACKER_PY)):
        directory.mkdir()
        (directory / "train.py").write_text(script)
    base = {"searcher": {"name": "single", "metric": "loss"}, "max_restarts": 0}
    victim_config = tmp_path / "victim.yaml"
    victim_config.write_text(yaml.safe_dump(
        {**base, "name": "victim", "entrypoint": f"python3 train.py {marker}"}))
    alice = cluster.ordinary_user(tmp_path)  # two ordinary users: alice and mallory
    victim = created_id(cluster.run("experiment", "create", str(victim_config),
                                    str(victim_dir), env_extra=alice).stdout)
    agent_dir = cluster.state_dir / "agent"
    wait_for(lambda: list(agent_dir.glob("trials/*/run-*/workdir/marker.txt")), 60, "the victim")
    # The victim's TensorBoard: its port authenticates nobody.
    identity = wait_for(lambda: cluster.printed(victim, "IDENTITY "), 60, "the victim's identity")
    board = cluster.run("tensorboard", "start", str(victim), "--config", "resources.slots=0",
                        env_extra=alice).stderr  # the attacker needs the other slot
    task = re.search(r"[0-9a-f-]{36}", board)
    assert task, board
    board_port = wait_for(lambda: _service_port(task.group(0)), 120, "the victim's TensorBoard")
    wait_for(lambda: board_port in _listening(), 120, "the victim's TensorBoard to listen")

    mallory = cluster.ordinary_user(tmp_path)
    attacker_config = tmp_path / "attacker.yaml"
    attacker_config.write_text(yaml.safe_dump({
        **base, "name": "attacker", "entrypoint": "python3 train.py",
        "environment": {"environment_variables": {
            "STATE_DIR": str(cluster.state_dir), "AGENT_HOME": str(Path.home()),
            "PG_PORT": str(urlsplit(postgres_url).port), "BOARD_PORT": str(board_port),
            "VICTIM_PORT": str(identity["port"]),
            "TEMPORAL": cluster.env["EPOCHAL_TEMPORAL_ADDRESS"]}}}))
    # A login of the agent's user (root's CLI keeps one in its home).
    home_secret = Path.home() / f".epochal-isolation-{marker}"
    home_secret.write_text(marker)
    try:
        attacker = created_id(cluster.run("experiment", "create", str(attacker_config),
                                          str(attacker_dir), env_extra=mallory).stdout)
        wait_for(lambda: experiment_state(cluster, attacker).removeprefix("STATE_")
                 in TERMINAL_STATES, timeout=120, what="the attacker's trial")
    finally:
        home_secret.unlink()
    assert experiment_state(cluster, attacker) == "STATE_COMPLETED"
    logs = cluster.run("trial", "logs", str(trial_of(cluster, attacker)["id"])).stdout
    # Root (the agent, the master's proxy) still reaches the victim's port, while it lives.
    socket.create_connection(("127.0.0.1", identity["port"]), timeout=10).close()
    cluster.run("experiment", "kill", str(victim), env_extra=alice)
    cluster.run("tensorboard", "kill", task.group(0), check=False, env_extra=alice)

    secrets = cluster.secrets
    for secret in (secrets["cluster_token"], secrets["admin_password"], marker,
                   urlsplit(postgres_url).password):
        assert secret and secret not in logs
    [line] = [line for line in logs.splitlines() if "FOUND " in line]
    found = json.loads(line.split("FOUND ", 1)[1])
    # Each user's runs are an identity of their own (agent_worker/sandbox.py).
    assert found["uid"] >= RUN_ID_BASE and identity["uid"] >= RUN_ID_BASE
    assert found["uid"] != identity["uid"]
    # Nothing of the victim's storage: not even a file it made readable by all (its directory
    # is its user's alone), no write, no rename; not its /dev/shm.
    assert found["victim_files"] == ["<PermissionError>", "<PermissionError>"], found
    assert found["victim_dir_written"] == ["PermissionError"], found
    assert found["victim_dir_renamed"] == ["PermissionError"], found
    assert found["shm"] == [], found
    # Nor the victim's TensorBoard (the master's proxy still reaches it: it started), nor a port
    # the victim opened itself (which root reached, above).
    assert found["board"] == found["victim_port"] == "ConnectionRefusedError", found
    assert found["secrets"] == found["cli_login"] == "<FileNotFoundError>"
    assert found["other_runs"] == []
    # Its own processes only: none of the master's, the agent's or the victim's.
    assert 0 < len(found["processes"]) < 10
    assert home_secret.name not in found["agent_home"]
    assert found["postgres"] == "InvalidPasswordError"
    assert found["temporal"] == "ConnectionRefusedError"  # it authenticates nobody
    assert found["register_agent"] in (401, 403)
    agents = {a["id"] for a in cluster.json("agent", "list")["agents"]}
    assert "forged-agent" not in agents
