"""What an agent needs to run one trial run or interactive task, read from its config once.

`RunSpec.of` turns the stored config model (`common.expconf`: an experiment's or a task's) into
the values the agent acts on, every default already applied there: the agent reads no field of
a config and writes no default. The trial workflow builds it once per trial and sends it in
`RunTrialInput.spec` as JSON (`model_dump(mode="json")`; Temporal's JSON converter carries
plain data in dataclasses); an interactive task's config never travels through Temporal, so
the agent builds its spec from the launch it fetches. `trial_run_spec` and `task_run_spec` are
the agent's one call each: a run scheduled before the master sent specs has none, and gets the
same builder's spec of the config it carries.

The config itself reaches the trial unread: `experiment_config` is what trial_info.json holds,
and `determined_config` what Determined's code in the trial is given (DET_EXPERIMENT_CONFIG).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from common.checkpoint_storage import shared_fs_directory, shared_fs_host_path
from common.expconf import (
    DEFAULT_SHM_SIZE,
    LENGTH_UNITS,
    EnvironmentConfig,
    ExperimentConfig,
    TaskConfig,
    profiling_enabled,
    stored_config,
    with_determined_defaults,
)
from wire.workflow_io import JSON, RunTrialInput


class _Spec(BaseModel):
    # Unknown keys are ignored: a newer master's spec still reads on an older agent.
    model_config = ConfigDict(frozen=True)


class Mount(_Spec):
    """One of the config's `bind_mounts`: the host side normalised (the master held it to its
    allowed roots); a relative `container_path` is under the working directory."""

    host_path: str
    container_path: str
    read_only: bool


class CheckpointStorage(_Spec):
    """The run's checkpoint storage, as the agent needs it."""

    stored: JSON  # as the config gives it: trial_info.json's `checkpoint_storage`, the harness's
    # shared_fs: where checkpoints land on the agent's host, `host_path[/storage_path]`: made
    # and checked writable before the run, kept visible in its sandbox.
    directory: str | None
    # shared_fs: `host_path`, mounted at itself and at Determined's /determined_shared_fs.
    host_path: str | None
    s3: bool  # S3: the trial keeps a checkpoint cache on the agent


class RunSpec(_Spec):
    """One trial run or interactive task, as its agent runs it (normalised values only)."""

    # The shell command line (a trial's always; a task's only for a command: the agent starts
    # the other tasks' services itself).
    entrypoint: str | None
    environment_variables: dict[str, str]  # the user's, one mapping whatever form they wrote
    image: str | None  # None: the agent's default image
    cuda_image: str | None  # a run with a CUDA slot; None: the agent's default image
    force_pull_image: bool
    shm_size: int  # bytes of /dev/shm in a task container
    bind_mounts: list[Mount]
    checkpoint_storage: CheckpointStorage | None  # None: a task, or the master's default
    # A trial's alone (a task has none of these).
    experiment_config: JSON | None  # the config as stored, passed on to the trial unread
    max_length: dict[str, int] | None  # the searcher's `max_length`: a run's default target
    profiling: bool  # the agent samples the run's system metrics
    debug: bool  # Determined's `debug`, as its TrialInfo takes it

    @classmethod
    def of(cls, config: ExperimentConfig | TaskConfig,
           stored: Mapping[str, Any] | None = None) -> RunSpec:
        """The spec of a run of `config`; `stored` is the experiment config as stored (what
        the trial gets verbatim), by default the model's dump."""
        if isinstance(config, TaskConfig):
            return cls(entrypoint=config.entrypoint, **_environment(config.environment),
                       shm_size=config.resources.shm_size or DEFAULT_SHM_SIZE,
                       bind_mounts=_mounts(config), checkpoint_storage=None,
                       experiment_config=None, max_length=None, profiling=False, debug=False)
        given = dict(stored) if stored is not None else config.model_dump(mode="json")
        searcher_length = config.searcher.max_length
        return cls(
            entrypoint=config.entrypoint, **_environment(config.environment),
            shm_size=config.resources.shm_size or DEFAULT_SHM_SIZE,
            bind_mounts=_mounts(config),
            checkpoint_storage=_storage(given.get("checkpoint_storage")),
            experiment_config=given,
            max_length=searcher_length.model_dump() if searcher_length is not None else None,
            profiling=profiling_enabled(given),
            debug=bool(config.debug),
        )

    def image_for(self, cuda: bool) -> str | None:
        """The image of a run with (or without) a CUDA slot; None: the agent's default."""
        return self.cuda_image if cuda else self.image

    def determined_config(self, max_length: Mapping[str, Any] | None = None, *,
                          shared_fs_mounted: bool = False) -> dict[str, Any]:
        """The experiment config as Determined's code in the trial should see it.

        As Determined's master gives it: its defaults filled in, and `searcher.max_length` only
        when there is one (Determined then offers no `core.searcher`, as 0.38 does). That is
        what this run trains to (`max_length`, an ASHA rung) when counted in batches, records
        or epochs; a run counted in a `time_metric` leaves it alone. shared_fs storage is given
        as it is where the runtime mounts it at Determined's path, else as the `directory`
        storage at its host directory (agent_worker/determined_env.py)."""
        config = with_determined_defaults(self.experiment_config or {})
        searcher = config.get("searcher")
        if isinstance(searcher, dict):
            if searcher.get("max_length") is None:
                searcher.pop("max_length", None)
            if isinstance(max_length, Mapping) and list(max_length) in (
                    [unit] for unit in LENGTH_UNITS):
                searcher["max_length"] = dict(max_length)
        storage = self.checkpoint_storage
        if storage is not None and storage.directory is not None and not shared_fs_mounted:
            config["checkpoint_storage"] = {"type": "directory",
                                            "container_path": storage.directory}
        elif storage is not None and storage.stored:
            config["checkpoint_storage"] = dict(storage.stored)
        return config


def _environment(environment: EnvironmentConfig) -> dict[str, Any]:
    """Variables and images: Determined's `{cpu: ..., cuda: ...}` image picked per device (a
    run with a CUDA slot takes `cuda`, else `cpu`), a blank name as none."""
    image = environment.image
    if isinstance(image, Mapping):
        cpu, cuda = image.get("cpu"), image.get("cuda") or image.get("cpu")
    else:
        cpu = cuda = image
    return {"environment_variables": dict(environment.environment_variables),
            "image": _image_name(cpu), "cuda_image": _image_name(cuda),
            "force_pull_image": environment.force_pull_image}


def _image_name(name: str | None) -> str | None:
    return name.strip() if name is not None and name.strip() else None


def _mounts(config: ExperimentConfig | TaskConfig) -> list[Mount]:
    return [Mount(host_path=posixpath.normpath(mount.host_path),
                  container_path=mount.container_path, read_only=mount.read_only)
            for mount in config.bind_mounts]


def _storage(stored: Any) -> CheckpointStorage | None:
    if not isinstance(stored, Mapping):
        return None
    return CheckpointStorage(stored=dict(stored), directory=shared_fs_directory(stored),
                             host_path=shared_fs_host_path(stored),
                             s3=stored.get("type") == "s3")


def trial_run_spec(inp: RunTrialInput) -> RunSpec:
    """The run's spec: the one its workflow sent, else (a run scheduled before workflows sent
    one) the same builder's, from the stored config the input carries."""
    if inp.spec is not None:
        return RunSpec.model_validate(inp.spec)
    return RunSpec.of(stored_config(inp.config), inp.config)


def task_run_spec(stored: Mapping[str, Any]) -> RunSpec:
    """An interactive task's spec, from its stored (normalised) config in the launch the agent
    fetched from the master."""
    return RunSpec.of(TaskConfig.model_validate(dict(stored)))
