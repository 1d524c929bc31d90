"""Determined's trial environment, so Core API scripts (`det.core.init()`) run unchanged.

Determined's client reads two things: `DET_*` environment variables (the session token, the
user, the master) and info files at the fixed paths `/run/determined/info/{cluster,trial,
rendezvous,resources}.json`, which `det.get_cluster_info()` reads and nothing else. Both are
derived here from the same trial info Epochal's own harness gets (agent_worker/trial_info.py),
with the config as Determined's code sees it (the run's spec makes it: wire/run_spec.py).
The runtimes put the files at `DETERMINED_INFO_DIR`, and a clean copy of the model definition at
`DETERMINED_MODEL_DIR` (read-only): the Docker runtime mounts them there, the process runtime
bind-mounts them there in a mount namespace of the trial's own (as root).

Determined mounts `shared_fs` storage's host_path at `/determined_shared_fs` in its containers,
and its code (`storage.build`, `torch_batch_process`) expects the `shared_fs` type there. Epochal's
runtimes mount it there too where they can (Docker; the process runtime in a mount namespace),
and at its host path, which Epochal's harness uses: checkpoints land in the same `<dir>/<uuid>/`
either way. A process runtime without mount namespaces (an agent that is not root) cannot: its
trials see the equivalent `directory` storage at `host_path[/storage_path]`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent_worker.private_files import write_private
from wire.run_spec import RunSpec

DETERMINED_INFO_DIR = "/run/determined/info"
SHARED_FS_CONTAINER_PATH = "/determined_shared_fs"  # where Determined's code looks for shared_fs
# Where Determined keeps a clean copy of the model definition: PyTorchTrial, DeepSpeedTrial and
# TFKerasTrial copy it into every checkpoint's `code/` (the working directory may hold data).
DETERMINED_MODEL_DIR = "/run/determined/train/model"
# A run's info files and model copy live next to its working directory (not inside: that is
# the user's).
_INFO_DIR_SUFFIX = ".det-info"
_MODEL_DIR_SUFFIX = ".det-model"
# DET_USER when the experiment's owner cannot be learnt (Determined only needs it non-empty).
FALLBACK_USER = "determined"


def determined_info_dir(run_dir: Path) -> Path:
    """Where the agent writes a run's Determined info files on its host."""
    return run_dir.with_name(run_dir.name + _INFO_DIR_SUFFIX)


def determined_model_dir(run_dir: Path) -> Path:
    """Where the agent extracts a run's clean copy of the model definition on its host."""
    return run_dir.with_name(run_dir.name + _MODEL_DIR_SUFFIX)


def determined_environment(info: Mapping[str, Any], spec: RunSpec, *, username: str,
                           shared_fs_mounted: bool = False) -> dict[str, str]:
    """The `DET_*` variables of a trial (determined/_info.py, common/api/authentication.py):
    the config is the run's as Determined's code sees it, training to this run's target (see
    the module docstring for its storage)."""
    det_config = spec.determined_config(info.get("max_length"),
                                        shared_fs_mounted=shared_fs_mounted)
    env = {
        "DET_MASTER": str(info["master_url"]),
        "DET_CLUSTER_ID": str(info.get("cluster_id") or "epochal"),
        "DET_AGENT_ID": str(info["agent_id"]),
        "DET_SLOT_IDS": json.dumps(list(info.get("slot_ids") or [])),
        "DET_TASK_ID": str(info["task_id"]),
        "DET_ALLOCATION_ID": str(info["allocation_id"]),
        # Determined refuses an empty token; a cluster without tokens ignores this one.
        "DET_SESSION_TOKEN": str(info.get("session_token") or "none"),
        "DET_USER": username or FALLBACK_USER,
        "DET_TASK_TYPE": "TRIAL",
        "DET_TRIAL_ID": str(info["trial_id"]),
        "DET_EXPERIMENT_ID": str(info["experiment_id"]),
        "DET_TRIAL_SEED": str(info["trial_seed"]),
        "DET_TRIAL_RUN_ID": str(info["trial_run_id"]),
        "DET_HPARAMS": json.dumps(info.get("hparams") or {}),
        "DET_EXPERIMENT_CONFIG": json.dumps(det_config),
        "DET_STEPS_COMPLETED": str(int(info.get("steps_completed") or 0)),
        "DET_RESOURCES_TYPE": "docker-container",
    }
    if info.get("latest_checkpoint"):
        env["DET_LATEST_CHECKPOINT"] = str(info["latest_checkpoint"])
    # Determined's launchers and core.distributed take their ports from these variables
    # (launch/torch_distributed.py, constants.py): free ones on the chief, so two trials on one
    # host never meet on the defaults.
    ports = list(_rendezvous(info)["ports"])
    for name, port in zip(("C10D_PORT", "INTER_TRAIN_PROCESS_COMM_PORT_1",
                           "INTER_TRAIN_PROCESS_COMM_PORT_2"), ports, strict=False):
        env[name] = str(port)
    return env


def _rendezvous(info: Mapping[str, Any]) -> dict[str, Any]:
    """The run's rendezvous (agent_worker/trial_info.py); a lone part when there is none."""
    found = info.get("rendezvous")
    if isinstance(found, Mapping):
        return dict(found)
    return {"container_addrs": ["127.0.0.1"], "container_rank": 0,
            "container_slot_counts": [len(info.get("slot_ids") or [])], "ports": []}


def determined_info_files(info: Mapping[str, Any], spec: RunSpec, *, username: str,
                          shared_fs_mounted: bool = False) -> dict[str, Any]:
    """File name -> JSON content of what `det.get_cluster_info()` reads (keys are the
    constructor arguments of ClusterInfo, TrialInfo, RendezvousInfo and ResourcesInfo)."""
    env = determined_environment(info, spec, username=username,
                                 shared_fs_mounted=shared_fs_mounted)
    slot_ids = list(info.get("slot_ids") or [])
    det_config = json.loads(env["DET_EXPERIMENT_CONFIG"])
    return {
        "cluster.json": {
            "master_url": env["DET_MASTER"],
            "cluster_id": env["DET_CLUSTER_ID"],
            "agent_id": env["DET_AGENT_ID"],
            "slot_ids": slot_ids,
            "task_id": env["DET_TASK_ID"],
            "allocation_id": env["DET_ALLOCATION_ID"],
            "session_token": env["DET_SESSION_TOKEN"],
            "task_type": "TRIAL",
            "master_cert_name": None,
            "master_cert_file": None,
            "latest_checkpoint": info.get("latest_checkpoint"),
        },
        "trial.json": {
            "trial_id": int(info["trial_id"]),
            "experiment_id": int(info["experiment_id"]),
            "trial_seed": int(info["trial_seed"]),
            "hparams": info.get("hparams") or {},
            "config": det_config,
            "steps_completed": int(info.get("steps_completed") or 0),
            "trial_run_id": int(info["trial_run_id"]),
            "debug": spec.debug,
            "inter_node_network_interface": None,
        },
        "rendezvous.json": {
            key: value for key, value in _rendezvous(info).items()
            if key in ("container_addrs", "container_rank", "container_slot_counts")
        },
        "resources.json": {"gpu_uuids": list(info.get("gpu_uuids") or [])},
    }


def write_determined_info(directory: Path, info: Mapping[str, Any], spec: RunSpec, *,
                          username: str, shared_fs_mounted: bool = False) -> None:
    """Write the info files into `directory` (created). They hold the run's token: the agent
    makes them private to the trial's user (agent_worker/trial_runs.py)."""
    directory.mkdir(parents=True, exist_ok=True)
    files = determined_info_files(info, spec, username=username,
                                  shared_fs_mounted=shared_fs_mounted)
    for name, content in files.items():
        write_private(directory / name, json.dumps(content) + "\n")
