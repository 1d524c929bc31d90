"""What the agent tells a trial run: `trial_info.json` and the environment variables.

See docs/CONTRACTS.md, "Trial info"; the harness reads both (harness/core/_info.py).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from common.temporal_names import allocation_id, task_id
from wire.run_spec import RunSpec
from wire.workflow_io import Rendezvous, RunTrialInput

TRIAL_INFO_FILE = "trial_info.json"
TRIAL_INFO_ENV = "EPOCHAL_TRIAL_INFO"
MASTER_ENV = "EPOCHAL_MASTER"
# The trial's own S3 checkpoint cache on this agent (harness/core/_checkpoint.py).
CHECKPOINT_CACHE_ENV = "EPOCHAL_CHECKPOINT_CACHE"


def build_trial_info(
    inp: RunTrialInput,
    spec: RunSpec,
    *,
    master_url: str,
    agent_id: str,
    cluster_id: str | None,
    slot_ids: list[int],
    rendezvous: Rendezvous,
) -> dict[str, Any]:
    storage = spec.checkpoint_storage
    return {
        "master_url": master_url,
        "cluster_id": cluster_id,
        "agent_id": agent_id,
        "experiment_id": inp.experiment_id,
        "trial_id": inp.trial_id,
        "trial_run_id": inp.run_id,
        "task_id": task_id(inp.experiment_id, inp.trial_id),
        "allocation_id": allocation_id(inp.experiment_id, inp.trial_id, inp.run_id),
        "trial_seed": inp.trial_seed,
        "hparams": inp.hparams,
        "experiment_config": spec.experiment_config,
        "latest_checkpoint": inp.latest_checkpoint,
        "steps_completed": inp.steps_completed,
        # The searcher's target for this run (a rung's length with ASHA), else the config's.
        "max_length": inp.max_length or spec.max_length,
        "checkpoint_storage": storage.stored if storage is not None else None,
        "slot_ids": list(slot_ids),
        "session_token": inp.session_token,
        # Every part of the run (one per agent), this one's rank, free ports on the chief.
        "rendezvous": asdict(rendezvous),
    }


def trial_environment(spec: RunSpec, *, trial_info_path: str, master_url: str
                      ) -> dict[str, str]:
    """Variables every runtime sets for a trial; the user's own (one mapping of strings,
    whatever form they wrote), then Epochal's (which win)."""
    env = dict(spec.environment_variables)
    env[TRIAL_INFO_ENV] = trial_info_path
    env[MASTER_ENV] = master_url
    env["PYTHONUNBUFFERED"] = "1"
    return env
