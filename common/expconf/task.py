"""The config of an interactive task (`TaskConfig`): Determined's config of commands, notebooks,
shells and TensorBoards (its master's `CommandConfig`), read with `validate_task_config`.

It shares the experiment config's `environment` and `bind_mounts` models and its `resources`
(with Determined's `slots` where an experiment has `slots_per_trial`). Determined's master
ignores unknown keys here; Epochal refuses them, as in an experiment config. The config arrives as
JSON, not YAML, so its bounds are checked on the data.
"""

import json
import re
import shlex
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationError, field_validator

from common.expconf._base import (
    _DUMPED_WHEN_GIVEN,
    _NOT_ACTED_ON,
    MAX_CONFIG_BYTES,
    MAX_CONFIG_DEPTH,
    MAX_CONFIG_VALUES,
    ConfigError,
    NotActedOn,
    _describe,
    _fail,
    _Model,
)
from common.expconf.determined import config_warnings
from common.expconf.environment import BindMount, EnvironmentConfig
from common.expconf.parsing import _format_errors
from common.expconf.resources import ResourcesConfig

# The longest idle_timeout taken: a year (a TaskWorkflow waits in timedeltas).
MAX_IDLE_TIMEOUT_SECONDS = 365 * 24 * 3600

# Go's time.ParseDuration, which Determined's master reads `idle_timeout` with.
_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_SECONDS_PER_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0,
                     "m": 60.0, "h": 3600.0}


def _duration_seconds(value: Any) -> Any:
    """Determined's durations ("30m", "1h", "1h30m", "2.5s") as seconds; a number is seconds."""
    if not isinstance(value, str):
        return value  # the float type reports anything but a number
    text = value.strip()
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise _fail(((), 'must be a duration such as "30m", "1h" or "1h30m" '
                         f"(got {_describe(value)})"))
    return sum(float(number) * _SECONDS_PER_UNIT[unit] for number, unit in parts)


def _given_for_a_trial(value: Any) -> Any:
    if value is not None:
        raise _fail(((), "is an experiment's field; a task asks for resources.slots"))
    return value


class TaskResourcesConfig(ResourcesConfig):
    """A task's `resources`: an experiment's, with Determined's `slots`. The scheduler takes
    the task's slots, pool and priority; `max_slots` and `weight` are experiments' knobs."""

    slots: int = Field(default=1, ge=0)
    slots_per_trial: Annotated[Any, AfterValidator(_given_for_a_trial), _DUMPED_WHEN_GIVEN] = None
    max_slots: NotActedOn = None
    weight: NotActedOn = None


class TaskConfig(_Model):
    """An interactive task's configuration, normalized: `entrypoint` is one command line (run
    with /bin/sh -c), `idle_timeout` seconds. `description` None: the master names the task."""

    description: str | None = None
    entrypoint: str | None = None
    resources: TaskResourcesConfig = Field(default_factory=TaskResourcesConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    bind_mounts: list[BindMount] = Field(default_factory=list)
    work_dir: str | None = Field(default=None, min_length=1)
    # Stop the task after this long without a request through the master's proxy.
    idle_timeout: float | None = Field(default=None, gt=0, le=MAX_IDLE_TIMEOUT_SECONDS)
    tensorboard_args: list[str] = Field(default_factory=list)
    # Epochal counts a notebook idle from the requests its proxy carries, whichever type.
    notebook_idle_type: Annotated[
        Literal["kernels_or_terminals", "kernel_connections", "activity"] | None, _NOT_ACTED_ON
    ] = None
    debug: NotActedOn = None
    pbs: NotActedOn = None
    slurm: NotActedOn = None

    @field_validator("entrypoint", mode="before")
    @classmethod
    def _one_command_line(cls, value: Any) -> Any:
        """Determined runs a list of one string with /bin/sh -c and a longer list as the
        program's arguments: one command line either way."""
        if not isinstance(value, list):
            return value
        if not value:
            raise _fail(((), "must not be empty"))
        if len(value) == 1:
            return value[0]  # the str type reports a non-string
        strings = [item for item in value if isinstance(item, str)]
        if len(strings) < len(value):
            raise _fail(((), "must be a command line or a list of strings "
                             f"(got {_describe(value)})"))
        return shlex.join(strings)

    @field_validator("entrypoint")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise _fail(((), "must not be empty"))
        return value

    @field_validator("idle_timeout", mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> Any:
        return _duration_seconds(value)


def _bound_errors(data: Any) -> list[str]:
    """The experiment config's bounds (depth, values, bytes), on data parsed from JSON."""
    values, stack = 0, [(data, 1)]
    while stack:
        item, depth = stack.pop()
        values += 1
        if depth > MAX_CONFIG_DEPTH:
            return [f"config: nested deeper than {MAX_CONFIG_DEPTH} levels"]
        if values > MAX_CONFIG_VALUES:
            return [f"config: more than {MAX_CONFIG_VALUES:,} values"]
        children = item.values() if isinstance(item, dict) else item if isinstance(
            item, list) else ()
        stack.extend((child, depth + 1) for child in children)
    size = len(json.dumps(data).encode("utf-8", "surrogatepass"))
    if size > MAX_CONFIG_BYTES:
        return [f"config: {size:,} bytes, more than the {MAX_CONFIG_BYTES:,} accepted"]
    return []


def validate_task_config(data: Any, task_type: str, source: str = "config") -> TaskConfig:
    """Validate a task's config (parsed JSON) for a task of `task_type` (COMMAND, NOTEBOOK,
    SHELL or TENSORBOARD); raises ConfigError listing every problem as `path.to.field: msg`."""
    kind = task_type.lower()
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([f"config: must be a mapping of fields (got {_describe(data)})"],
                          source, f"the {kind} config is not a mapping")
    bounds = _bound_errors(data)
    if bounds:
        raise ConfigError(bounds, source, "over a limit")
    errors = []
    if task_type == "COMMAND" and data.get("entrypoint") is None:
        errors.append("entrypoint: field required (the command line to run)")
    elif task_type != "COMMAND" and data.get("entrypoint") is not None:
        errors.append(f"entrypoint: a {kind} runs its own program; only commands take one")
    try:
        config = TaskConfig.model_validate(data)
    except ValidationError as exc:
        errors = [*_format_errors(exc), *errors]
    else:
        if not errors:
            return config
    count = len(errors)
    raise ConfigError(errors, source, f"the {kind} config has {count} error"
                      f"{'s' if count != 1 else ''}")


def task_config_warnings(config: TaskConfig) -> list[str]:
    """What a valid task config asks for that Epochal will not do, one line per field."""
    return config_warnings(config)  # type: ignore[arg-type]  # it walks any config model
