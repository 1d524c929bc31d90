"""`run_trial` with the process runtime, in temporalio's ActivityEnvironment, against a fake
master serving the model definition and taking task logs."""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import os
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from agent_worker.process_runtime import ProcessRuntime
from agent_worker.slots import SlotPool, cpu_slots
from agent_worker.trial_runs import AgentActivities
from tests.fakes.agent_master import FakeMaster, make_tgz
from wire.workflow_io import RunTrialInput, RunTrialResult

_experiment_ids = itertools.count(100)

CONFIG: dict[str, Any] = {
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 100}},
    "checkpoint_storage": {"type": "shared_fs", "host_path": "/tmp/ckpts"},
    "environment": {"environment_variables": {"MY_VAR": "hello", "MY_NUM": "3"}},
    "resources": {"resource_pool": "default"},
}

# What the run saw goes to $SEEN_DIR (its own directory is removed when it ends).
TRAIN_PY = """
import json, os, stat, sys
print("INFO: starting", flush=True)
for i in range(450):
    print(f"line {i}")
print("oops", file=sys.stderr)
info = os.environ["EPOCHAL_TRIAL_INFO"]
os.makedirs("../data", exist_ok=True)  # as Determined's tutorials keep their datasets
with open("../data/probe", "w") as f:
    f.write("x")
with open(os.path.join(os.environ.get("SEEN_DIR", "."), "seen.json"), "w") as f:
    json.dump({
        "env": {k: os.environ.get(k) for k in (
            "EPOCHAL_TRIAL_INFO", "EPOCHAL_MASTER", "PYTHONUNBUFFERED", "MY_VAR", "MY_NUM",
            "PATH", "PYTHONPATH")},
        "executable": sys.executable,
        "cwd": os.getcwd(),
        "helper": open("pkg/helper.py").read() if os.path.exists("pkg") else None,
        "info": json.load(open(info)),
        "modes": {"info": stat.S_IMODE(os.stat(info).st_mode),
                  "workdir": stat.S_IMODE(os.stat(".").st_mode),
                  "run_dir": stat.S_IMODE(os.stat("..").st_mode)},
    }, f)
sys.exit(int(os.environ.get("EXIT_CODE", "0")))
"""

# Ignores SIGTERM and starts a child that ignores it too; both must die after the grace period.
STUBBORN_PY = """
import os, signal, subprocess, sys, time
def on_term(signum, frame):
    print("got SIGTERM, ignoring it", flush=True)
signal.signal(signal.SIGTERM, on_term)
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
print("ready", flush=True)  # before the pids appear: the test cancels once they do
with open("pids.tmp", "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
os.rename("pids.tmp", "pids")
while True:
    time.sleep(0.05)
"""


def make_activities(master: FakeMaster, http: httpx.AsyncClient, work_dir: Path,
                    **runtime_kwargs: Any) -> AgentActivities:
    runtime_kwargs.setdefault("heartbeat_interval", 0.1)
    return AgentActivities(
        agent_id="agent-1", master_url=master.url, work_dir=work_dir, http=http,
        runtime=ProcessRuntime(**runtime_kwargs), slots=SlotPool(cpu_slots(2)),
        cluster_id="test-cluster", log_flush_interval=0.05)


def trial_input(experiment_id: int, config: dict[str, Any] | None = None, *, trial_id: int = 7,
                run_id: int = 2) -> RunTrialInput:
    return RunTrialInput(
        experiment_id=experiment_id, trial_id=trial_id, run_id=run_id,
        hparams={"lr": 0.1}, config=config or CONFIG, trial_seed=42,
        latest_checkpoint="ckpt-uuid", steps_completed=10)


def with_env(extra: dict[str, Any]) -> dict[str, Any]:
    """CONFIG with more variables, as strings (as the config model stores them)."""
    env = dict(CONFIG["environment"]["environment_variables"],
               **{k: str(v) for k, v in extra.items()})
    return {**CONFIG, "environment": {"environment_variables": env}}


async def test_run_trial_ships_logs_and_writes_trial_info(
        master: FakeMaster, http: httpx.AsyncClient, tmp_path: Path) -> None:
    exp = next(_experiment_ids)
    master.model_defs[exp] = make_tgz({"train.py": TRAIN_PY, "pkg/helper.py": "X = 1\n"})
    work_dir, seen_dir = tmp_path / "work", tmp_path / "seen"
    seen_dir.mkdir()
    acts = make_activities(master, http, work_dir)
    env = ActivityEnvironment()
    heartbeats: list[tuple[Any, ...]] = []
    env.on_heartbeat = lambda *details: heartbeats.append(details)
    config = with_env({"SEEN_DIR": str(seen_dir)})

    result = await env.run(acts.run_trial, trial_input(exp, config))

    assert result == RunTrialResult(exit_code=0, agent_id="agent-1",
                                    message="exited with code 0")
    assert heartbeats
    workdir = work_dir / "trials" / "7" / "run-2" / "workdir"
    seen = json.loads((seen_dir / "seen.json").read_text())
    assert seen["helper"] == "X = 1\n"
    # Its token was in files only it could read, and they are gone with the run; so is what
    # it wrote beside its working directory.
    assert seen["modes"] == {"info": 0o600, "workdir": 0o700, "run_dir": 0o700}
    assert not (work_dir / "trials" / "7").exists()

    # Logs: every line, in order, with the contract's fields.
    stdout = master.log_lines("stdout")
    assert stdout == ["INFO: starting"] + [f"line {i}" for i in range(450)]
    assert master.log_lines("stderr") == ["oops"]
    first = master.logs[0]
    assert {k: first[k] for k in ("taskId", "allocationId", "agentId", "stdtype", "level")} == {
        "taskId": f"{exp}.7", "allocationId": f"{exp}.7.2", "agentId": "agent-1",
        "stdtype": "stdout", "level": "LOG_LEVEL_INFO"}
    assert first["timestamp"].endswith("Z")

    # A run on one agent is its own rendezvous: this host, three ports free on it.
    rendezvous = seen["info"].pop("rendezvous")
    assert {k: v for k, v in rendezvous.items() if k != "ports"} == {
        "container_addrs": ["127.0.0.1"], "container_rank": 0, "container_slot_counts": [1]}
    assert len(set(rendezvous["ports"])) == 3
    assert seen["info"] == {
        "master_url": master.url, "cluster_id": "test-cluster", "agent_id": "agent-1",
        "experiment_id": exp, "trial_id": 7, "trial_run_id": 2, "task_id": f"{exp}.7",
        "allocation_id": f"{exp}.7.2", "trial_seed": 42, "hparams": {"lr": 0.1},
        "experiment_config": config, "latest_checkpoint": "ckpt-uuid", "steps_completed": 10,
        "max_length": {"batches": 100},
        "checkpoint_storage": {"type": "shared_fs", "host_path": "/tmp/ckpts"},
        "slot_ids": [0], "session_token": None}
    assert seen["env"]["EPOCHAL_TRIAL_INFO"] == str(workdir / "trial_info.json")
    assert seen["env"]["EPOCHAL_MASTER"] == master.url
    assert seen["env"]["PYTHONUNBUFFERED"] == "1"
    assert seen["env"]["MY_VAR"] == "hello"
    assert seen["env"]["MY_NUM"] == "3"
    assert seen["env"]["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    assert seen["env"]["PYTHONPATH"].split(os.pathsep)[0] == str(workdir)
    assert Path(seen["cwd"]).resolve() == workdir.resolve()
    # `python3` in the entrypoint is the agent's interpreter (it has the harness installed).
    assert Path(seen["executable"]).parent == Path(sys.executable).parent


async def test_exit_codes_and_signals(master: FakeMaster, http: httpx.AsyncClient,
                                      tmp_path: Path) -> None:
    exp = next(_experiment_ids)
    master.model_defs[exp] = make_tgz({"train.py": TRAIN_PY})
    acts = make_activities(master, http, tmp_path)

    failed = await ActivityEnvironment().run(
        acts.run_trial, trial_input(exp, with_env({"EXIT_CODE": 3}), run_id=1))
    assert (failed.exit_code, failed.message) == (3, "exited with code 3")

    killed = await ActivityEnvironment().run(
        acts.run_trial, trial_input(exp, {**CONFIG, "entrypoint": "kill -9 $$"}, run_id=2))
    assert (killed.exit_code, killed.message) == (-9, "killed by signal 9 (SIGKILL)")
    # The model definition was fetched once for both runs.
    assert master.model_def_requests == [exp]


async def test_run_dir_is_fresh_for_each_attempt(master: FakeMaster, http: httpx.AsyncClient,
                                                 tmp_path: Path) -> None:
    exp = next(_experiment_ids)
    # What an earlier attempt (of an agent that crashed) left is not seen by the next.
    master.model_defs[exp] = make_tgz({"train.py": "import os; assert not os.path.exists('stale')\n"
                                                   "open('leftover', 'w').write('x')\n"})
    acts = make_activities(master, http, tmp_path)
    inp = trial_input(exp, {**CONFIG, "entrypoint": "python3 train.py"})
    run_dir = tmp_path / "trials" / "7" / "run-2"
    run_dir.mkdir(parents=True)
    (run_dir / "stale").write_text("from an earlier attempt")
    result = await ActivityEnvironment().run(acts.run_trial, inp)
    assert result.exit_code == 0, master.log_lines()
    assert not run_dir.exists()


def _dead(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


async def _wait_for_file(path: Path, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        await asyncio.sleep(0.02)
    return path.read_text()


async def test_cancel_kills_the_whole_process_group(master: FakeMaster,
                                                    http: httpx.AsyncClient,
                                                    tmp_path: Path) -> None:
    exp = next(_experiment_ids)
    master.model_defs[exp] = make_tgz({"train.py": STUBBORN_PY})
    acts = make_activities(master, http, tmp_path, kill_grace_seconds=0.5)
    env = ActivityEnvironment()
    task = asyncio.create_task(env.run(acts.run_trial, trial_input(exp)))
    parent, child = map(int, (await _wait_for_file(
        tmp_path / "trials" / "7" / "run-2" / "workdir" / "pids")).split())
    assert not _dead(parent) and not _dead(child)

    cancelled_at = time.monotonic()
    env.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    elapsed = time.monotonic() - cancelled_at

    assert 0.5 <= elapsed < 5, elapsed  # the grace period, then SIGKILL
    assert _dead(parent) and _dead(child)
    # What the process printed until the end was shipped before the cancellation returned.
    assert master.log_lines("stdout") == ["ready", "got SIGTERM, ignoring it"]
    assert acts.slots.in_use() == 0


async def test_cancel_waits_less_when_the_process_exits_on_sigterm(
        master: FakeMaster, http: httpx.AsyncClient, tmp_path: Path) -> None:
    exp = next(_experiment_ids)
    master.model_defs[exp] = make_tgz({"train.py": "import time\nprint('up', flush=True)\n"
                                                    "time.sleep(600)\n"})
    acts = make_activities(master, http, tmp_path, kill_grace_seconds=30)
    env = ActivityEnvironment()
    task = asyncio.create_task(env.run(acts.run_trial, trial_input(exp)))
    while master.log_lines() != ["up"]:
        await asyncio.sleep(0.02)
    started = time.monotonic()
    env.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < 5


async def test_worker_shutdown_fails_the_run_retryably(
        master: FakeMaster, http: httpx.AsyncClient, tmp_path: Path) -> None:
    exp = next(_experiment_ids)
    master.model_defs[exp] = make_tgz({"train.py": "import time\nprint('up', flush=True)\n"
                                                    "time.sleep(600)\n"})
    acts = make_activities(master, http, tmp_path, kill_grace_seconds=1)
    env = ActivityEnvironment()
    task = asyncio.create_task(env.run(acts.run_trial, trial_input(exp)))
    while master.log_lines() != ["up"]:
        await asyncio.sleep(0.02)
    env.worker_shutdown()
    env.cancel()
    with pytest.raises(ApplicationError) as err:
        await task
    assert err.value.type == "AgentShutdown"
    assert not err.value.non_retryable


def _tgz_with(member: tarfile.TarInfo, data: bytes = b"x") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        train = tarfile.TarInfo("train.py")
        train.size = 1
        tar.addfile(train, io.BytesIO(b"\n"))
        if member.isreg():
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
        else:
            tar.addfile(member)
    return buffer.getvalue()


def _symlink(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE
    info.linkname = target
    return info


@pytest.mark.parametrize("member", [
    tarfile.TarInfo("../escaped.py"),
    tarfile.TarInfo("sub/../../escaped.py"),
    tarfile.TarInfo("/tmp/epochal-test-absolute.py"),
    _symlink("link", "../../../../escaped.py"),
    _symlink("abs-link", "/etc/passwd"),
], ids=["dotdot", "nested-dotdot", "absolute", "symlink-out", "symlink-absolute"])
async def test_unsafe_model_definition_is_rejected(
        master: FakeMaster, http: httpx.AsyncClient, tmp_path: Path,
        member: tarfile.TarInfo) -> None:
    exp = next(_experiment_ids)
    master.model_defs[exp] = _tgz_with(member)
    work_dir = tmp_path / "work"
    acts = make_activities(master, http, work_dir)
    with pytest.raises(ApplicationError) as err:
        await ActivityEnvironment().run(acts.run_trial, trial_input(exp))
    assert err.value.non_retryable
    assert err.value.type == "ModelDefinitionError"
    assert not (tmp_path / "escaped.py").exists()
    assert not (work_dir / "trials" / "escaped.py").exists()
    assert not Path("/tmp/epochal-test-absolute.py").exists()
    assert master.logs == []
    assert acts.slots.in_use() == 0


async def test_missing_or_broken_model_definition(master: FakeMaster, http: httpx.AsyncClient,
                                                  tmp_path: Path) -> None:
    acts = make_activities(master, http, tmp_path)
    with pytest.raises(ApplicationError) as err:
        await ActivityEnvironment().run(acts.run_trial, trial_input(999_999))
    assert err.value.non_retryable
    assert "999999" in err.value.message and "404" in err.value.message

    exp = next(_experiment_ids)
    master.model_defs[exp] = b"not a tarball"
    with pytest.raises(ApplicationError) as err:
        await ActivityEnvironment().run(acts.run_trial, trial_input(exp))
    assert err.value.non_retryable
    # The bad copy is not kept: a later attempt downloads it again.
    assert not (tmp_path / "model_defs" / f"{exp}.tgz").exists()


async def test_trials_run_concurrently(master: FakeMaster, http: httpx.AsyncClient,
                                       tmp_path: Path) -> None:
    exp = next(_experiment_ids)
    # Each run waits (bounded) for the other to have started: only concurrent runs finish fast.
    master.model_defs[exp] = make_tgz({"train.py": """
import json, os, sys, time
print("slot", json.load(open(os.environ["EPOCHAL_TRIAL_INFO"]))["slot_ids"][0])
open(f"../../../started-{os.environ['TRIAL']}", "w").close()
other = "1" if os.environ["TRIAL"] == "2" else "2"
deadline = time.time() + 10
while not os.path.exists(f"../../../started-{other}"):
    if time.time() > deadline:
        sys.exit(1)
    time.sleep(0.01)
"""})
    acts = make_activities(master, http, tmp_path)
    results = await asyncio.gather(*(
        ActivityEnvironment().run(acts.run_trial,
                                  trial_input(exp, with_env({"TRIAL": t}), trial_id=t))
        for t in (1, 2)))
    assert [r.exit_code for r in results] == [0, 0]
    slots = [line.split()[1] for line in master.log_lines("stdout") if line.startswith("slot")]
    assert sorted(slots) == ["0", "1"]


# What a part of a distributed run is told (the GPU variables, Determined's ports, the torchrun
# command Epochal's launcher would run), written to $SEEN_DIR.
PART_PY = """
import json, os, sys
sys.argv = ["launcher", "python3", "train.py"]
from harness.core import _info
from harness.launch.torch_distributed import torchrun_command
info = _info.from_environment()
with open(os.path.join(os.environ["SEEN_DIR"], "part.json"), "w") as f:
    json.dump({"env": {k: os.environ.get(k) for k in (
        "CUDA_VISIBLE_DEVICES", "C10D_PORT", "INTER_TRAIN_PROCESS_COMM_PORT_1",
        "INTER_TRAIN_PROCESS_COMM_PORT_2", "DET_SLOT_IDS")},
        "torchrun": torchrun_command(info, [], ["python3", "train.py"])}, f)
"""


async def test_a_part_of_a_run_on_several_gpu_agents_gets_its_gpus_and_the_rendezvous(
        master: FakeMaster, http: httpx.AsyncClient, tmp_path: Path) -> None:
    """The GPU path with a fake NVML (no NVIDIA GPU here): agent 2 of 2, slots 2 and 3."""
    from agent_worker.slots import discover_slots
    from tests.unit.test_scheduler_parts import fake_nvml
    from wire.workflow_io import Rendezvous

    exp = next(_experiment_ids)
    master.model_defs[exp] = make_tgz({"train.py": PART_PY})
    seen_dir = tmp_path / "seen"
    seen_dir.mkdir()
    gpus = [(f"GPU-{i}", b"Fake A100", 80 << 30) for i in range(4)]
    acts = AgentActivities(
        agent_id="agent-2", master_url=master.url, work_dir=tmp_path / "work", http=http,
        runtime=ProcessRuntime(heartbeat_interval=0.1),
        slots=SlotPool(discover_slots(nvml=fake_nvml(gpus))), log_flush_interval=0.05)
    rendezvous = Rendezvous(container_addrs=["10.0.0.1", "10.0.0.2"], container_rank=1,
                            container_slot_counts=[2, 2], ports=[29500, 29501, 29502])
    inp = trial_input(exp, with_env({"SEEN_DIR": str(seen_dir)}))
    inp.slot_ids, inp.rendezvous = [2, 3], rendezvous

    result = await ActivityEnvironment().run(acts.run_trial, inp)

    assert result.exit_code == 0, master.log_lines("stderr")
    seen = json.loads((seen_dir / "part.json").read_text())
    assert seen["env"] == {
        "CUDA_VISIBLE_DEVICES": "GPU-2,GPU-3", "C10D_PORT": "29500",
        "INTER_TRAIN_PROCESS_COMM_PORT_1": "29501", "INTER_TRAIN_PROCESS_COMM_PORT_2": "29502",
        "DET_SLOT_IDS": "[2, 3]"}
    command = seen["torchrun"]
    options = dict(zip(command[3:13:2], command[4:14:2], strict=True))
    assert options == {"--nnodes": "2", "--nproc_per_node": "2", "--node_rank": "1",
                       "--master_addr": "10.0.0.1", "--master_port": "29500"}
    assert command[-2:] == ["python3", "train.py"]


BUSY_PY = """
import time
end = time.monotonic() + 1.5
while time.monotonic() < end:
    sum(range(10000))
"""


async def test_profiling_enabled_runs_are_sampled_by_the_agent(
        master: FakeMaster, http: httpx.AsyncClient, tmp_path: Path) -> None:
    exp = next(_experiment_ids)
    master.model_defs[exp] = make_tgz({"train.py": BUSY_PY})
    acts = make_activities(master, http, tmp_path / "work")
    acts.system_metrics_interval = 0.2
    inp = trial_input(exp, {**CONFIG, "profiling": {"enabled": True}})
    inp.session_token = "ept.run-token"

    result = await ActivityEnvironment().run(acts.run_trial, inp)

    assert result.exit_code == 0
    posts = list(master.metric_posts)
    assert len(posts) >= 3
    assert all(trial == 7 and auth == "Bearer ept.run-token" for trial, _, auth in posts)
    bodies = [body for _, body, _ in posts]
    assert {b["group"] for b in bodies} == {"system"}
    keys = [b["metrics"]["stepsCompleted"] for b in bodies]
    assert keys == sorted(keys) and abs(keys[-1] / 1000 - time.time()) < 30  # ms since epoch
    busiest = max(b["metrics"]["metrics"]["avgMetrics"]["cpu_util_percent"] for b in bodies)
    assert busiest > 30

    master.metric_posts.clear()  # without `profiling: {enabled: true}`: nothing
    result = await ActivityEnvironment().run(acts.run_trial, trial_input(exp, run_id=3))
    assert result.exit_code == 0 and master.metric_posts == []
