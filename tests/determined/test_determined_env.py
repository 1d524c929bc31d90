"""Determined's trial environment (agent_worker/determined_env.py), read by Determined's client.

The variables and info files are checked by what Determined 0.38.1 itself makes of them, in its
own venv: `ClusterInfo`, `TrialInfo`, the task session, and the storage manager the Core API
builds. Then a whole run through `run_trial` and the process runtime shows that
`det.get_cluster_info()` inside a trial finds its own info at the fixed path.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.testing import ActivityEnvironment

from agent_worker.determined_env import (
    determined_environment,
    determined_info_dir,
    write_determined_info,
)
from agent_worker.process_runtime import ProcessRuntime, can_make_mount_namespaces
from agent_worker.slots import SlotPool, cpu_slots
from agent_worker.trial_runs import AgentActivities
from tests.fakes.agent_master import FakeMaster, make_tgz
from tests.fakes.run_specs import spec_of
from wire.workflow_io import RunTrialInput

CONFIG: dict[str, Any] = {
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 100}},
    "checkpoint_storage": {"type": "shared_fs", "host_path": "/tmp/ckpts",
                           "storage_path": "det", "save_trial_best": 1},
    "debug": True,
}

INFO: dict[str, Any] = {
    "master_url": "http://127.0.0.1:8080",
    "cluster_id": "c-1",
    "agent_id": "agent-1",
    "experiment_id": 3,
    "trial_id": 9,
    "trial_run_id": 2,
    "task_id": "3.9",
    "allocation_id": "3.9.2",
    "trial_seed": 77,
    "hparams": {"lr": 0.1, "nested": {"units": 8}},
    "experiment_config": CONFIG,
    "latest_checkpoint": "0b5c5b8e-5c44-4bbd-8f4e-1f0f6c1c8a11",
    "steps_completed": 40,
    "max_length": {"batches": 25},
    "checkpoint_storage": CONFIG["checkpoint_storage"],
    "slot_ids": [1],
    "session_token": "ept.9.sig",
}
SPEC = spec_of(CONFIG)  # the run's, as the master builds it

# Run by Determined's Python: what its own code makes of the environment and the files.
READ_BACK = """
import json, os, sys
import determined as det
from determined import core
from determined.common import constants, storage
from determined.common.api import authentication
info_dir = sys.argv[1]
load = lambda name: json.load(open(os.path.join(info_dir, name)))
cluster = det.ClusterInfo(trial_info=det.TrialInfo(**load("trial.json")),
                          rendezvous_info=det.RendezvousInfo(**load("rendezvous.json")),
                          resources_info=det.ResourcesInfo(**load("resources.json")),
                          **load("cluster.json"))
from_env = det.TrialInfo._from_env()
session = authentication.login_from_task(cluster.master_url, cert=None)
manager = storage.build(cluster.trial._config["checkpoint_storage"],
                        container_path=constants.SHARED_FS_CONTAINER_PATH)
print(json.dumps({
    "required_env": det.ClusterInfo._from_env().allocation_id,
    "trial_id": cluster.trial.trial_id, "hparams": cluster.trial.hparams,
    "latest": cluster.latest_checkpoint, "rank": cluster.container_rank,
    "slots": cluster.slot_ids, "debug": cluster.trial._debug,
    "env_trial": [from_env.trial_id, from_env.trial_seed, from_env._steps_completed,
                  from_env._trial_run_id],
    "user": session.username, "token": session.token, "header": session.AUTH_HEADER,
    "storage": str(manager._base_path),
    "max_length": core._parse_searcher_max_length(cluster.trial._config),
}))
"""


def test_config_seen_by_determined_points_at_epochal_storage() -> None:
    config = SPEC.determined_config(INFO["max_length"])
    assert config["checkpoint_storage"] == {"type": "directory",
                                            "container_path": "/tmp/ckpts/det"}
    assert config["searcher"]["max_length"] == {"batches": 25}  # this run's target
    assert INFO["experiment_config"]["searcher"]["max_length"] == {"batches": 100}  # untouched
    assert SPEC.experiment_config == CONFIG  # untouched
    s3 = spec_of({**CONFIG, "checkpoint_storage": {"type": "s3", "bucket": "b"}})
    assert s3.determined_config(INFO["max_length"])["checkpoint_storage"] == {"type": "s3",
                                                                              "bucket": "b"}


def test_environment_without_checkpoint_or_token() -> None:
    env = determined_environment({**INFO, "latest_checkpoint": None, "session_token": None},
                                 SPEC, username="")
    assert "DET_LATEST_CHECKPOINT" not in env
    assert env["DET_SESSION_TOKEN"] and env["DET_USER"] == "determined"


def test_determined_reads_the_variables_and_files(det_venv: Path, tmp_path: Path) -> None:
    write_determined_info(tmp_path, INFO, SPEC, username="alice")
    env = {**os.environ, **determined_environment(INFO, SPEC, username="alice")}
    done = subprocess.run([str(det_venv / "python"), "-c", READ_BACK, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "required_env": "3.9.2",
        "trial_id": 9, "hparams": INFO["hparams"], "latest": INFO["latest_checkpoint"],
        "rank": 0, "slots": [1], "debug": True,
        "env_trial": [9, 77, 40, 2],
        "user": "alice", "token": "ept.9.sig", "header": "Grpc-Metadata-x-allocation-token",
        "storage": "/tmp/ckpts/det", "max_length": 25,
    }


# Inside the trial: Determined's own entry point to its info, at the fixed path.
PROBE_PY = """
import json, os
import determined as det
info = det.get_cluster_info()
with open(os.path.join(os.environ["PROBE_OUT"], "probe.json"), "w") as f:
    json.dump({"trial": info.trial.trial_id, "allocation": info.allocation_id,
               "latest": info.latest_checkpoint, "hparams": info.trial.hparams}, f)
"""


@pytest.mark.skipif(not can_make_mount_namespaces(),
                    reason="the process runtime needs mount namespaces (root) for this")
async def test_trial_finds_its_cluster_info(det_venv: Path, tmp_path: Path) -> None:
    with FakeMaster() as master:
        master.model_defs[41] = make_tgz({"probe.py": PROBE_PY})
        async with httpx.AsyncClient() as http:
            acts = AgentActivities(
                agent_id="agent-1", master_url=master.url, work_dir=tmp_path, http=http,
                runtime=ProcessRuntime(heartbeat_interval=0.1), slots=SlotPool(cpu_slots(2)),
                cluster_id="test-cluster", log_flush_interval=0.05)
            config = {**CONFIG, "entrypoint": f"{det_venv / 'python'} probe.py",
                      "environment": {"environment_variables": {"PROBE_OUT": str(tmp_path)}}}
            inp = RunTrialInput(experiment_id=41, trial_id=5, run_id=3, hparams={"lr": 0.5},
                                config=config, trial_seed=1, latest_checkpoint="ck-1",
                                steps_completed=10)
            result = await ActivityEnvironment().run(acts.run_trial, inp)
    run_dir = acts.run_dir(inp)
    assert result.exit_code == 0, master.log_lines()
    probe = json.loads((tmp_path / "probe.json").read_text())
    assert probe == {"trial": 5, "allocation": "41.5.3", "latest": "ck-1",
                     "hparams": {"lr": 0.5}}
    assert not determined_info_dir(run_dir).exists()  # removed with the run
    # The host's own directory is left as it was: the trial saw its private mount.
    assert not Path("/run/determined/info/cluster.json").exists()


def test_without_mount_namespaces_the_entrypoint_runs_as_before(tmp_path: Path) -> None:
    from agent_worker.runtime import Launch

    runtime = ProcessRuntime()
    run_dir = tmp_path / "run-1"
    determined_info_dir(run_dir).mkdir(parents=True)
    inp = RunTrialInput(experiment_id=1, trial_id=2, run_id=1, hparams={}, config=CONFIG,
                        trial_seed=0, latest_checkpoint=None, steps_completed=0)
    launch = Launch(input=inp, spec=SPEC, run_dir=run_dir, entrypoint="python3 train.py",
                    env={})
    if runtime.private_mounts:
        assert runtime.command(launch)[:2] == ["unshare", "--mount"]
        assert runtime.command(launch)[-1] == "python3 train.py"
    runtime.private_mounts = False
    assert runtime.command(launch) == ["/bin/sh", "-c", "python3 train.py"]
