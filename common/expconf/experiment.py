"""The experiment config as a whole (`ExperimentConfig`) and its `profiling` section."""

import shlex
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from common.expconf._base import (
    _DUMPED_WHEN_GIVEN,
    _NOT_ACTED_ON,
    NotActedOn,
    PlainData,
    _check_plain_data,
    _describe,
    _fail,
    _Model,
)
from common.expconf.environment import BindMount, EnvironmentConfig, ReproducibilityConfig

# HyperparameterGroup: pydantic resolves the forward reference inside `Hyperparameter` here.
from common.expconf.hyperparameters import (
    Hyperparameter,
    HyperparameterGroup,  # noqa: F401
    _grid_errors,
    hyperparameters_grid_size,
)
from common.expconf.lengths import Length
from common.expconf.resources import ResourcesConfig
from common.expconf.searchers import SearcherConfig
from common.expconf.storage import CheckpointStorageConfig


def _check_profiling(value: Any) -> Any:
    """Determined's `profiling` section: `enabled` turns the agent's system metrics on;
    `begin_on_batch`, `end_after_batch` and `sync_timings` are for Determined's own loops."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _fail(((), "expected a mapping such as {enabled: true}"))
    if not isinstance(value.get("enabled", False), bool):
        raise _fail((("enabled",), "expected true or false"))
    for name in ("begin_on_batch", "end_after_batch"):
        given = value.get(name)
        if given is not None and (isinstance(given, bool) or not isinstance(given, int)
                                  or given < 0):
            raise _fail(((name,), "expected a whole number >= 0"))
    return value


Profiling = Annotated[Any, AfterValidator(_check_plain_data), AfterValidator(_check_profiling),
                    _DUMPED_WHEN_GIVEN]


def profiling_enabled(config: Mapping[str, Any]) -> bool:
    """Whether a (normalized) config asks the agent for system metrics, as Determined's
    `profiling.enabled` asks its profiler (off unless given)."""
    profiling = config.get("profiling")
    return isinstance(profiling, Mapping) and profiling.get("enabled") is True


class ExperimentConfig(_Model):
    """An experiment's configuration, normalized.

    ``checkpoint_storage`` None means the master's default storage; ``reproducibility.
    experiment_seed`` None means the master picks a seed when the experiment is created.
    """

    name: str = "Experiment"
    description: str | None = None
    labels: list[str] = Field(default_factory=list)
    data: dict[str, PlainData] = Field(default_factory=dict)
    entrypoint: str
    hyperparameters: dict[str, Hyperparameter] = Field(default_factory=dict)
    searcher: SearcherConfig
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig)
    max_restarts: int = Field(default=5, ge=0)
    min_validation_period: Length | None = None
    min_checkpoint_period: Length | None = None
    checkpoint_storage: CheckpointStorageConfig | None = None
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    bind_mounts: list[BindMount] = Field(default_factory=list)
    reproducibility: ReproducibilityConfig = Field(default_factory=ReproducibilityConfig)
    # Where the experiment is filed (both names, or neither: the default project).
    workspace: Annotated[str | None, Field(min_length=1, max_length=128), _DUMPED_WHEN_GIVEN] = None
    project: Annotated[str | None, Field(min_length=1, max_length=128), _DUMPED_WHEN_GIVEN] = None
    # Determined's fields that Epochal keeps but does not act on (config_warnings names them).
    records_per_epoch: NotActedOn = None
    scheduling_unit: NotActedOn = None
    perform_initial_validation: NotActedOn = None
    checkpoint_policy: Annotated[
        Literal["best", "all", "none"] | None, _NOT_ACTED_ON
    ] = None
    profiling: Profiling = None
    optimizations: NotActedOn = None
    debug: NotActedOn = None
    tensorboard_storage: NotActedOn = None
    integrations: NotActedOn = None
    log_policies: NotActedOn = None
    retention_policy: NotActedOn = None
    preemption_timeout: NotActedOn = None
    internal: NotActedOn = None
    slurm: NotActedOn = None
    pbs: NotActedOn = None
    security: NotActedOn = None
    data_layer: NotActedOn = None
    batches_per_step: NotActedOn = None

    @field_validator("entrypoint", mode="before")
    @classmethod
    def _entrypoint_to_str(cls, value: Any) -> Any:
        if isinstance(value, list):
            if not value:
                raise _fail(((), "must not be empty"))
            bad = [(i, v) for i, v in enumerate(value) if not isinstance(v, str)]
            if bad:
                raise _fail(*(((i,), f"must be a string (got {_describe(v)})") for i, v in bad))
            return shlex.join(value)
        return value

    @field_validator("entrypoint")
    @classmethod
    def _entrypoint_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise _fail(((), "must not be empty"))
        return value

    @model_validator(mode="after")
    def _searcher_fits_hyperparameters(self) -> "ExperimentConfig":
        if self.searcher.name == "grid":
            errors = _grid_errors(self.hyperparameters)
            if errors:
                raise _fail(*errors)
        return self





def planned_trials(config: ExperimentConfig) -> int:
    """How many trials the searcher runs in all: one, the grid's points, or `max_trials`."""
    searcher = config.searcher
    if searcher.name == "single":
        return 1
    if searcher.name == "grid":
        return hyperparameters_grid_size(config.hyperparameters)
    return int(getattr(searcher, "max_trials", 1))
