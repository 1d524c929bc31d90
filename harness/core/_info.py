"""What the agent tells a trial about itself, read once from ``EPOCHAL_TRIAL_INFO``.

The agent writes ``trial_info.json`` into the trial's working directory and points
``EPOCHAL_TRIAL_INFO`` at it; ``EPOCHAL_MASTER``, when set, overrides the file's ``master_url``.
This module is the only place the harness reads the environment.
"""

from __future__ import annotations

import copy
import functools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

TRIAL_INFO_ENV = "EPOCHAL_TRIAL_INFO"
MASTER_ENV = "EPOCHAL_MASTER"

# batches, records or epochs; or, with Determined 0.38's `time_metric`, that metric's name.
LengthUnit = str
LENGTH_UNITS: tuple[LengthUnit, ...] = ("batches", "records", "epochs")


@dataclass(frozen=True)
class TrialInfo:
    """Everything a trial run is told when it starts. ``master_url`` is None off-cluster.

    ``max_length`` (in ``length_unit``) is how far this run trains: the searcher's
    ``max_length``, or an ASHA rung. Both are None when the config has no ``max_length``
    (optional since Determined 0.38): the training code then decides how long to train.
    """

    experiment_id: int
    trial_id: int
    trial_run_id: int
    task_id: str
    allocation_id: str
    trial_seed: int
    hparams: dict[str, Any]
    experiment_config: dict[str, Any]
    latest_checkpoint: str | None
    steps_completed: int
    max_length: int | None
    length_unit: LengthUnit | None
    checkpoint_storage: dict[str, Any]
    master_url: str | None
    agent_id: str | None
    session_token: str | None = None
    cluster_id: str | None = None
    slot_ids: tuple[int, ...] = field(default=())
    # A run on several slots: every agent's address, this one's rank, free ports on the chief.
    rendezvous: dict[str, Any] | None = None

    @property
    def on_cluster(self) -> bool:
        return self.master_url is not None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, master_url: str | None = None) -> TrialInfo:
        """Parse the trial info JSON (see docs/CONTRACTS.md, "Trial info").

        Raises ``ValueError`` naming the field that is missing or of the wrong type.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"trial info must be a JSON object, got {type(data).__name__}")
        experiment_id = _int(data, "experiment_id")
        trial_id = _int(data, "trial_id")
        run_id = _int(data, "trial_run_id")
        task_id = _opt_str(data, "task_id") or f"{experiment_id}.{trial_id}"
        config = _dict(data, "experiment_config", default={})
        storage = _dict(data, "checkpoint_storage", default=None)
        if storage is None:
            storage = dict(config.get("checkpoint_storage") or {})
        raw_length = data.get("max_length")
        if raw_length is None:
            raw_length = (config.get("searcher") or {}).get("max_length")
        max_length, unit = (None, None) if raw_length is None else parse_max_length(raw_length)
        url = master_url or _opt_str(data, "master_url")
        if not url:
            raise ValueError(f"trial info: master_url is missing (and {MASTER_ENV} is not set)")
        slot_ids = data.get("slot_ids") or []
        if not isinstance(slot_ids, list) or not all(_is_int(s) for s in slot_ids):
            raise ValueError("trial info: slot_ids must be a list of ints")
        steps = _int(data, "steps_completed", default=0)
        if steps < 0:
            raise ValueError(f"trial info: steps_completed must be >= 0, got {steps}")
        return cls(
            experiment_id=experiment_id,
            trial_id=trial_id,
            trial_run_id=run_id,
            task_id=task_id,
            allocation_id=_opt_str(data, "allocation_id") or f"{task_id}.{run_id}",
            trial_seed=_int(data, "trial_seed"),
            hparams=_dict(data, "hparams", default={}),
            experiment_config=config,
            latest_checkpoint=_opt_str(data, "latest_checkpoint"),
            steps_completed=steps,
            max_length=max_length,
            length_unit=unit,
            checkpoint_storage=storage,
            master_url=url,
            agent_id=_opt_str(data, "agent_id"),
            session_token=_opt_str(data, "session_token"),
            cluster_id=_opt_str(data, "cluster_id"),
            slot_ids=tuple(slot_ids),
            rendezvous=_dict(data, "rendezvous", default=None),
        )

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, master_url: str | None = None) -> TrialInfo:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"cannot read trial info from {os.fspath(path)!r}: {e}") from e
        try:
            return cls.from_dict(data, master_url=master_url)
        except ValueError as e:
            raise ValueError(f"{os.fspath(path)}: {e}") from e

    @classmethod
    def off_cluster(
        cls,
        *,
        hparams: Mapping[str, Any] | None = None,
        max_length: int = 100,
        length_unit: LengthUnit = "batches",
        latest_checkpoint: str | None = None,
        trial_seed: int = 0,
        checkpoint_dir: str | os.PathLike[str] = "checkpoints",
    ) -> TrialInfo:
        """Info for a run on a laptop: no master, checkpoints in ``checkpoint_dir``."""
        if hparams is not None and not isinstance(hparams, Mapping):
            raise TypeError(f"hparams must be a dict, got {type(hparams).__name__}")
        max_length, length_unit = parse_max_length({length_unit: max_length})
        if not _is_int(trial_seed):
            raise TypeError(f"trial_seed must be an int, got {trial_seed!r}")
        return cls(
            experiment_id=0,
            trial_id=0,
            trial_run_id=1,
            task_id="0.0",
            allocation_id="0.0.1",
            trial_seed=trial_seed,
            hparams=copy.deepcopy(dict(hparams or {})),
            experiment_config={},
            latest_checkpoint=latest_checkpoint,
            steps_completed=0,
            max_length=max_length,
            length_unit=length_unit,
            checkpoint_storage={"type": "shared_fs", "host_path": os.fspath(checkpoint_dir)},
            master_url=None,
            agent_id=None,
        )


def parse_max_length(raw: Any) -> tuple[int, LengthUnit]:
    """``{"batches": 300}`` -> ``(300, "batches")``; a bare int means batches."""
    if _is_int(raw):
        raw = {"batches": raw}
    if not isinstance(raw, Mapping) or len(raw) != 1:
        raise ValueError(
            "max_length must be one of {\"batches\": N}, {\"records\": N}, {\"epochs\": N}; "
            f"got {raw!r}"
        )
    ((unit, value),) = raw.items()
    if not isinstance(unit, str) or not unit:
        raise ValueError(f"max_length unit must be a name such as batches; got {unit!r}")
    if not _is_int(value) or value < 1:
        raise ValueError(f"max_length.{unit} must be an int >= 1, got {value!r}")
    return value, unit


@functools.cache
def _load(path: str, master_url: str | None) -> TrialInfo:
    return TrialInfo.from_file(path, master_url=master_url)


def from_environment(environ: Mapping[str, str] | None = None) -> TrialInfo | None:
    """The trial info named by ``EPOCHAL_TRIAL_INFO``, or None off-cluster. Read once per path."""
    env = os.environ if environ is None else environ
    path = env.get(TRIAL_INFO_ENV)
    if not path:
        return None
    return _load(path, env.get(MASTER_ENV) or None)


def torch_distributed_environment(
    environ: Mapping[str, str] | None = None,
) -> dict[str, int] | None:
    """The place torchrun gave this process (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
    GROUP_RANK), as DistributedContext's keywords; None when torchrun did not start it."""
    env = os.environ if environ is None else environ
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
    if not all(env.get(n, "").isdigit() for n in names):
        return None
    size, local_size = int(env["WORLD_SIZE"]), max(1, int(env["LOCAL_WORLD_SIZE"]))
    return {
        "rank": int(env["RANK"]),
        "size": size,
        "local_rank": int(env["LOCAL_RANK"]),
        "local_size": local_size,
        "cross_rank": int(env.get("GROUP_RANK") or 0),
        "cross_size": max(1, size // local_size),
    }


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_MISSING: Any = object()


def _int(data: Mapping[str, Any], name: str, default: int = _MISSING) -> int:
    value = data.get(name)
    if value is None and default is not _MISSING:
        return default
    if not _is_int(value):
        what = "is missing" if value is None else f"must be an int, got {value!r}"
        raise ValueError(f"trial info: {name} {what}")
    return cast(int, value)


def _opt_str(data: Mapping[str, Any], name: str) -> str | None:
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"trial info: {name} must be a string or null, got {value!r}")
    return value


def _dict(data: Mapping[str, Any], name: str, default: Any) -> Any:
    value = data.get(name)
    if value is None:
        return copy.deepcopy(default)
    if not isinstance(value, dict):
        raise ValueError(f"trial info: {name} must be an object, got {type(value).__name__}")
    return value
