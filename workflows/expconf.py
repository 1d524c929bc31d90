"""The experiment configuration: the one model shared by the CLI, the API and the workflows.

Field names and defaults follow Determined's experiment config (``schemas/expconf/v0``), so that a
Determined config needs no change beyond the features Epochal has not built yet.

``parse_experiment_config`` reads YAML text and ``validate_experiment_config`` checks parsed data;
both raise ``ConfigError`` listing every problem at once as ``path.to.field: message``. The
normalized form, ``ExperimentConfig.model_dump(mode="json")``, is what travels to workflows and
agents; ``ExperimentConfig.model_validate`` reads it back unchanged.

This module is imported inside Temporal workflows, so it stays pure: pydantic, stdlib and pyyaml.
"""

import difflib
import json
import math
import re
import shlex
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, ClassVar, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    RootModel,
    SerializerFunctionWrapHandler,
    Tag,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from common.temporal_names import DEFAULT_RESOURCE_POOL

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_CONFIG_DEPTH",
    "MAX_CONFIG_VALUES",
    "MAX_GRID_SIZE",
    "MAX_HYPERPARAMETERS",
    "MAX_TRIALS",
    "SEARCHER_CONFIGS",
    "BindMount",
    "CategoricalHyperparameter",
    "CheckpointStorageConfig",
    "ConfigError",
    "ConstHyperparameter",
    "DoubleHyperparameter",
    "EnvironmentConfig",
    "ExperimentConfig",
    "GridConfig",
    "Hyperparameter",
    "HyperparameterGroup",
    "IntHyperparameter",
    "LENGTH_UNITS",
    "Length",
    "LogHyperparameter",
    "RandomConfig",
    "ReproducibilityConfig",
    "ResourcesConfig",
    "S3Config",
    "SearcherConfig",
    "SharedFSConfig",
    "SingleConfig",
    "config_warnings",
    "hyperparameters_grid_size",
    "iter_hyperparameters",
    "PLACEHOLDER_STORAGE",
    "load_config_yaml",
    "parse_experiment_config",
    "validate_experiment_config",
    "with_default_storage",
    "with_determined_defaults",
]

MAX_GRID_SIZE = 100_000
"""The largest grid search accepted: one trial per point."""

# Bounds on what a config may ask of the master, checked where its text is parsed (so a config
# stored before a bound changed still replays): Determined's own example configs are under 3 KiB.
MAX_CONFIG_BYTES = 64 * 1024
MAX_CONFIG_DEPTH = 32  # nested mappings and lists
MAX_CONFIG_VALUES = 20_000  # counted with YAML aliases expanded, as validation sees them
MAX_HYPERPARAMETERS = 1_000
MAX_TRIALS = MAX_GRID_SIZE

# Error type of checks that report one or more problems below the location that raised them;
# the context's "errors" holds (relative path, message) pairs.
_EXPCONF_ERROR = "expconf"

Path = tuple[str | int, ...]


class ConfigError(Exception):
    """An experiment config that cannot be used; ``errors`` lists every problem found.

    Each error reads ``path.to.field: message`` (list items as ``field[2]``), except a YAML syntax
    error, which names the source and the line and column instead.
    """

    def __init__(self, errors: list[str], source: str = "config", summary: str | None = None):
        self.errors = list(errors)
        self.source = source
        count = len(self.errors)
        self.summary = summary or (
            f"the experiment config has {count} error{'s' if count != 1 else ''}"
        )
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join([f"{self.source}: {self.summary}:", *(f"  {e}" for e in self.errors)])


def _fail(*errors: tuple[Path, str]) -> PydanticCustomError:
    """An error to raise from a validator, located at (relative) paths below it."""
    return PydanticCustomError(
        _EXPCONF_ERROR,
        "{summary}",
        {"summary": "; ".join(_join(path, msg) for path, msg in errors), "errors": list(errors)},
    )


class _UnknownField:
    """Stands in for the value of an unknown key, carrying the message to report for it."""

    def __init__(self, message: str):
        self.message = message


def _suggest(word: str, choices: Iterator[str] | list[str]) -> str:
    match = difflib.get_close_matches(word, list(choices), n=1)
    return f'; did you mean "{match[0]}"?' if match else ""


def _is_plain_data(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, list):
        return all(_is_plain_data(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain_data(v) for k, v in value.items())
    return False


def _check_plain_data(value: Any) -> Any:
    if not _is_plain_data(value):
        raise ValueError(
            "must be plain data (strings, numbers, booleans, null, lists and mappings with "
            "string keys); quote values such as dates"
        )
    return value


class _NotActedOnMarker:
    def __repr__(self) -> str:
        return "NotActedOn"


_NOT_ACTED_ON = _NotActedOnMarker()


class _DumpedWhenGivenMarker:
    def __repr__(self) -> str:
        return "DumpedWhenGiven"


# Marks a field Epochal acts on but leaves out of dumps when null (added after configs were
# stored: their normalized form stays as it was).
_DUMPED_WHEN_GIVEN = _DumpedWhenGivenMarker()


class _Model(BaseModel):
    """Strict types (no "5" for 5), no unknown keys, and null meaning "the default".

    ``_determined_only`` names the fields declared ``NotActedOn``: Determined's fields that
    Epochal accepts and keeps (default null) but does not act on. ``config_warnings`` names each
    one given, and dumps leave out those not given (and the null ``_DUMPED_WHEN_GIVEN`` fields),
    so normalized configs stay as they were.
    """

    model_config = ConfigDict(extra="forbid", strict=True)
    _determined_only: ClassVar[frozenset[str]] = frozenset()
    _omitted_when_null: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        fields = cls.model_fields.items()
        cls._determined_only = frozenset(
            name for name, field in fields if _NOT_ACTED_ON in field.metadata
        )
        cls._omitted_when_null = cls._determined_only | frozenset(
            name for name, field in fields if _DUMPED_WHEN_GIVEN in field.metadata
        )

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            for name in self._omitted_when_null:
                if data.get(name) is None:
                    data.pop(name, None)
        return data

    @model_validator(mode="before")
    @classmethod
    def _prepare(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        prepared: dict[Any, Any] = {}
        for key, value in data.items():
            field = fields.get(key) if isinstance(key, str) else None
            if field is None:
                # extra="forbid" reports it; the marker tells the report what to say.
                prepared[key] = _UnknownField(cls._unknown_field_message(str(key)))
            elif value is None and not field.is_required() and field.get_default() is not None:
                continue  # Determined treats null as "not given"
            else:
                prepared[key] = value
        return prepared

    @classmethod
    def _unknown_field_message(cls, key: str) -> str:
        return "unknown field" + _suggest(key, list(cls.model_fields))


# --- lengths ------------------------------------------------------------------------------------

LENGTH_UNITS = ("batches", "records", "epochs")


class Length(_Model):
    """A training length, one of ``{batches: N}``, ``{records: N}``, ``{epochs: N}``.

    A bare integer means batches, as in old Determined configs. Dumps as the one-key mapping.
    0 is allowed (Determined's `min_validation_period` default is `{batches: 0}`: "never");
    the searcher's `max_length` must be positive (`SearcherLength`).
    """

    batches: int | None = Field(default=None, ge=0)
    records: int | None = Field(default=None, ge=0)
    epochs: int | None = Field(default=None, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _bare_int(cls, data: Any) -> Any:
        if isinstance(data, int) and not isinstance(data, bool):
            return {"batches": data}
        return data

    @model_validator(mode="after")
    def _exactly_one(self) -> "Length":
        if sum(getattr(self, u) is not None for u in LENGTH_UNITS) != 1:
            raise _fail(((), 'must have exactly one of "batches", "records" or "epochs"'))
        return self

    @property
    def unit(self) -> Literal["batches", "records", "epochs"]:
        for u in LENGTH_UNITS:
            if getattr(self, u) is not None:
                return u  # type: ignore[return-value]
        raise AssertionError("validated Length without a unit")

    @property
    def value(self) -> int:
        value: int = getattr(self, self.unit)
        return value

    @model_serializer
    def _dump(self) -> dict[str, int]:  # type: ignore[override]  # replaces _Model's
        return {self.unit: self.value}


def _positive_length(length: Length) -> Length:
    if length.value < 1:
        raise _fail(((length.unit,), f"must be >= 1 (got {length.value})"))
    return length


SearcherLength = Annotated[Length, AfterValidator(_positive_length)]
"""A searcher's `max_length`: a Length of at least 1 (Determined's check-positive-length)."""


# --- hyperparameters ----------------------------------------------------------------------------

_HP_TYPES = ("const", "int", "double", "log", "categorical")


PlainData = Annotated[Any, AfterValidator(_check_plain_data)]
# A Determined field Epochal keeps but does not act on (any plain data; see _Model). The marker
# is how _Model finds them.
NotActedOn = Annotated[Any, AfterValidator(_check_plain_data), _NOT_ACTED_ON]


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


class ConstHyperparameter(_Model):
    type: Literal["const"] = "const"
    val: PlainData


class _RangeHyperparameter(_Model):
    @model_validator(mode="after")
    def _ordered(self) -> Any:
        minval, maxval = getattr(self, "minval"), getattr(self, "maxval")  # noqa: B009
        if minval > maxval:
            raise _fail((("maxval",), f"must be >= minval ({maxval} < {minval})"))
        return self


class IntHyperparameter(_RangeHyperparameter):
    type: Literal["int"] = "int"
    minval: int
    maxval: int
    count: int | None = Field(default=None, ge=1)


class DoubleHyperparameter(_RangeHyperparameter):
    type: Literal["double"] = "double"
    minval: float
    maxval: float
    count: int | None = Field(default=None, ge=1)


class LogHyperparameter(_RangeHyperparameter):
    """Values ``base ** x`` for exponents ``x`` between ``minval`` and ``maxval``."""

    type: Literal["log"] = "log"
    base: float = Field(default=10.0, gt=0)
    minval: float
    maxval: float
    count: int | None = Field(default=None, ge=1)


class CategoricalHyperparameter(_Model):
    type: Literal["categorical"] = "categorical"
    vals: list[PlainData] = Field(min_length=1)


def _hyperparameter_tag(value: Any) -> str | None:
    if isinstance(value, dict):
        if "type" not in value:
            return "<group>"
        kind = value["type"]
        return f"<{kind}>" if isinstance(kind, str) and kind in _HP_TYPES else None
    if isinstance(value, HyperparameterGroup):
        return "<group>"
    if isinstance(value, BaseModel):
        return f"<{getattr(value, 'type', '')}>"
    return "<value>"  # a plain scalar or list: shorthand for const


def _const_shorthand(value: Any) -> Any:
    return {"type": "const", "val": value}


Hyperparameter = Annotated[
    Annotated[ConstHyperparameter, Tag("<const>")]
    | Annotated[IntHyperparameter, Tag("<int>")]
    | Annotated[DoubleHyperparameter, Tag("<double>")]
    | Annotated[LogHyperparameter, Tag("<log>")]
    | Annotated[CategoricalHyperparameter, Tag("<categorical>")]
    | Annotated["HyperparameterGroup", Tag("<group>")]
    | Annotated[ConstHyperparameter, BeforeValidator(_const_shorthand), Tag("<value>")],
    Discriminator(
        _hyperparameter_tag,
        custom_error_type="hyperparameter_type",
        custom_error_message="unknown hyperparameter type",
    ),
]
"""One hyperparameter: a typed mapping, a nested group (a mapping without "type"), or a value."""


class HyperparameterGroup(RootModel[dict[str, Hyperparameter]]):
    """Nested hyperparameters; trials receive them as a nested mapping."""


HyperparameterGroup.model_rebuild()


def iter_hyperparameters(
    hparams: Mapping[str, Any], prefix: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every hyperparameter that is not a group, with its path, in sorted name order.

    An empty group is yielded itself (as a leaf whose value is ``{}``).
    """
    for name in sorted(hparams):
        hp = hparams[name]
        path = (*prefix, name)
        if isinstance(hp, HyperparameterGroup) and hp.root:
            yield from iter_hyperparameters(hp.root, path)
        else:
            yield path, hp


def _grid_axis_size(hp: Any) -> int:
    if isinstance(hp, IntHyperparameter):
        if hp.count is None:
            raise ValueError("int hyperparameter without count")
        return min(hp.count, hp.maxval - hp.minval + 1)
    if isinstance(hp, (DoubleHyperparameter, LogHyperparameter)):
        if hp.count is None:
            raise ValueError(f"{hp.type} hyperparameter without count")
        return hp.count
    if isinstance(hp, CategoricalHyperparameter):
        return len(hp.vals)
    return 1


def hyperparameters_grid_size(hparams: Mapping[str, Any]) -> int:
    """Number of points of the grid over ``hparams`` (every range needs a count)."""
    return math.prod(_grid_axis_size(hp) for _, hp in iter_hyperparameters(hparams))


def _grid_errors(hparams: Mapping[str, Any]) -> list[tuple[Path, str]]:
    errors: list[tuple[Path, str]] = [
        (("hyperparameters", *path, "count"), "required for grid search")
        for path, hp in iter_hyperparameters(hparams)
        if isinstance(hp, (IntHyperparameter, DoubleHyperparameter, LogHyperparameter))
        and hp.count is None
    ]
    if not errors:
        size = hyperparameters_grid_size(hparams)
        if size > MAX_GRID_SIZE:
            errors.append(
                (
                    ("hyperparameters",),
                    f"the grid has {size:,} points, more than the {MAX_GRID_SIZE:,} allowed; "
                    "lower some counts",
                )
            )
    return errors


# --- searchers ----------------------------------------------------------------------------------


class _SearcherBase(_Model):
    """What every searcher has.

    `max_length` is optional, as in Determined 0.38, which deprecated it: without it the
    training code decides how long to train, and Epochal assumes no length (trials get none).
    """

    name: str
    metric: str = Field(min_length=1)
    smaller_is_better: bool = True
    max_length: SearcherLength | None = None
    # Epochal starts trials from scratch (no weights from another trial's checkpoint).
    source_trial_id: Annotated[int | None, _NOT_ACTED_ON] = None
    source_checkpoint_uuid: Annotated[str | None, _NOT_ACTED_ON] = None

    @classmethod
    def _unknown_field_message(cls, key: str) -> str:
        if key in _ALL_SEARCHER_FIELDS:
            return f'not a field of the "{cls.model_fields["name"].default}" searcher'
        return super()._unknown_field_message(key)


class SingleConfig(_SearcherBase):
    """One trial with each hyperparameter's middle value."""

    name: Literal["single"] = "single"


class GridConfig(_SearcherBase):
    """One trial per point of the grid of hyperparameters (every range needs a ``count``)."""

    name: Literal["grid"] = "grid"
    max_concurrent_trials: int = Field(default=16, ge=0)


class RandomConfig(_SearcherBase):
    """``max_trials`` trials with hyperparameters sampled at random."""

    name: Literal["random"] = "random"
    max_trials: int = Field(ge=1)
    max_concurrent_trials: int = Field(default=16, ge=0)


class _HalvingBase(_SearcherBase):
    """What asynchronous successive halving shares (Determined's names and defaults).

    The length a rung needs is counted either in the `max_length` unit (a validation's
    `steps_completed`) or, in Determined 0.38's form, in `time_metric`, a value the training
    code reports with its validation metrics, up to `max_time`.
    """

    time_metric: str | None = Field(default=None, min_length=1)
    max_time: int | None = Field(default=None, ge=1)
    max_trials: int = Field(ge=1)
    max_concurrent_trials: int = Field(default=16, ge=0)
    divisor: float = Field(default=4.0, gt=1)
    stop_once: bool = True

    @model_validator(mode="after")
    def _one_length(self) -> "_HalvingBase":
        timed = self.time_metric is not None or self.max_time is not None
        if self.max_length is not None and timed:
            raise _fail(((), 'give either "max_length" or "time_metric" with "max_time", not both'))
        if self.max_length is None and not timed:
            raise _fail((("max_length",), 'field required (or "time_metric" and "max_time")'))
        if timed and self.time_metric is None:
            raise _fail((("time_metric",), 'field required with "max_time"'))
        if timed and self.max_time is None:
            raise _fail((("max_time",), 'field required with "time_metric"'))
        return self

    @property
    def length_unit(self) -> str:
        """What rung lengths count: a max_length unit, or the time metric's name."""
        return self.max_length.unit if self.max_length is not None else str(self.time_metric)

    @property
    def total_length(self) -> int:
        return self.max_length.value if self.max_length is not None else int(self.max_time or 0)


class AsyncHalvingConfig(_HalvingBase):
    """ASHA with one bracket of `num_rungs` rungs."""

    name: Literal["async_halving"] = "async_halving"
    num_rungs: int = Field(ge=1)


class AdaptiveAshaConfig(_HalvingBase):
    """ASHA over several brackets (how many: `mode`, or `bracket_rungs` given outright)."""

    name: Literal["adaptive_asha"] = "adaptive_asha"
    mode: Literal["aggressive", "standard", "conservative"] = "standard"
    max_rungs: int = Field(default=5, ge=1)
    bracket_rungs: list[Annotated[int, Field(ge=1)]] | None = None


# To add a searcher: a class above, a line here and a member of the union below.
SEARCHER_CONFIGS: dict[str, type[_SearcherBase]] = {
    "single": SingleConfig,
    "grid": GridConfig,
    "random": RandomConfig,
    "async_halving": AsyncHalvingConfig,
    "adaptive_asha": AdaptiveAshaConfig,
}
_ALL_SEARCHER_FIELDS = frozenset(f for c in SEARCHER_CONFIGS.values() for f in c.model_fields)


def _keyed_tag(key: str, choices: Mapping[str, Any] | tuple[str, ...]) -> Any:
    def tag(value: Any) -> str | None:
        kind = value.get(key) if isinstance(value, dict) else getattr(value, key, None)
        return f"<{kind}>" if isinstance(kind, str) and kind in choices else None

    return tag


SearcherConfig = Annotated[
    Annotated[SingleConfig, Tag("<single>")]
    | Annotated[GridConfig, Tag("<grid>")]
    | Annotated[RandomConfig, Tag("<random>")]
    | Annotated[AsyncHalvingConfig, Tag("<async_halving>")]
    | Annotated[AdaptiveAshaConfig, Tag("<adaptive_asha>")],
    Discriminator(
        _keyed_tag("name", SEARCHER_CONFIGS),
        custom_error_type="searcher_name",
        custom_error_message="unknown searcher",
    ),
]


# --- resources, storage, environment -----------------------------------------------------------


_MEMORY_SIZE = re.compile(r"([0-9]*\.)?[0-9]+ ?(([kmgtp](i?b)?)|b)?", re.IGNORECASE)


def _memory_size(value: Any) -> Any:
    """Determined's memory sizes ("4G", "512MiB", "1.5 gb"; binary units) -> bytes."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if not _MEMORY_SIZE.fullmatch(text):
        got = _describe(value)
        raise _fail(((), f'must be a number of bytes or a size such as "4G" (got {got})'))
    number = text.rstrip("bBiI ").rstrip("kmgtpKMGTP ").strip()
    unit = text[len(number) :].strip()[:1].lower()
    return int(float(number) * 1024 ** " kmgtp".index(unit or " "))


class ResourcesConfig(_Model):
    slots_per_trial: int = Field(default=1, ge=0)
    # Determined's default is "" (the cluster's default pool); "" means that here too.
    resource_pool: str = Field(default=DEFAULT_RESOURCE_POOL, min_length=1)
    priority: int | None = Field(default=None, ge=1, le=99)
    max_slots: int | None = Field(default=None, ge=0)
    # Bytes of /dev/shm in a task container; Determined's sizes such as "4G" are read as bytes.
    shm_size: Annotated[int, BeforeValidator(_memory_size)] | None = Field(default=None, ge=1)
    # Scales the experiment's fair share among those of equal priority (Determined's default 1).
    weight: Annotated[float | None, Field(gt=0), _DUMPED_WHEN_GIVEN] = None
    native_parallel: NotActedOn = None
    agent_label: NotActedOn = None
    devices: NotActedOn = None
    is_single_node: NotActedOn = None
    slots: NotActedOn = None  # Determined's commands' and notebooks' field

    @field_validator("resource_pool", mode="before")
    @classmethod
    def _default_pool(cls, value: Any) -> Any:
        return DEFAULT_RESOURCE_POOL if value == "" else value


class SharedFSConfig(_Model):
    """Checkpoints in ``host_path/<uuid>/`` (or ``host_path/storage_path/<uuid>/``)."""

    type: Literal["shared_fs"] = "shared_fs"
    host_path: str = Field(min_length=1)
    storage_path: str | None = None
    save_experiment_best: int = Field(default=0, ge=0)
    save_trial_best: int = Field(default=1, ge=0)
    save_trial_latest: int = Field(default=1, ge=0)
    # Determined's legacy keys; the storage is mounted at host_path in task containers.
    container_path: NotActedOn = None
    propagation: NotActedOn = None
    checkpoint_path: NotActedOn = None
    tensorboard_path: NotActedOn = None


class S3Config(_Model):
    """Checkpoints in ``s3://bucket/prefix/<uuid>/``: Epochal's harness uploads them through
    URLs the master presigns, Determined's Core API with boto3 (common/checkpoint_storage.py)."""

    type: Literal["s3"] = "s3"
    bucket: str = Field(min_length=1)
    access_key: str | None = None
    secret_key: str | None = None
    endpoint_url: str | None = None
    prefix: str | None = None

    @field_validator("prefix")
    @classmethod
    def _prefix_stays_inside(cls, value: str | None) -> str | None:
        if value is not None and ".." in value.split("/"):
            raise _fail(((), 'must not contain ".." as a path part'))
        return value
    save_experiment_best: int = Field(default=0, ge=0)
    save_trial_best: int = Field(default=1, ge=0)
    save_trial_latest: int = Field(default=1, ge=0)


_STORAGE_TYPES = ("shared_fs", "s3")

CheckpointStorageConfig = Annotated[
    Annotated[SharedFSConfig, Tag("<shared_fs>")] | Annotated[S3Config, Tag("<s3>")],
    Discriminator(
        _keyed_tag("type", _STORAGE_TYPES),
        custom_error_type="storage_type",
        custom_error_message="unknown checkpoint storage type",
    ),
]

_DEVICE_KEYS = frozenset({"cpu", "cuda", "gpu", "rocm"})


def _is_per_device(value: Any) -> bool:
    """Determined's ``{cpu: ..., cuda: ...}`` form of a per-device setting."""
    return isinstance(value, dict) and bool(value) and set(value) <= _DEVICE_KEYS


def _env_value(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    return None


def _normalize_env(value: Any) -> Any:
    """``["K=V", ...]``, ``{K: V}`` or ``{cpu: [...], cuda: [...]}`` -> ``{K: V}``."""
    errors: list[tuple[Path, str]] = []
    result: dict[str, str] = {}
    origin: dict[str, str] = {}

    def add_list(items: Any, where: Path) -> None:
        if not isinstance(items, list):
            errors.append((where, 'must be a list of "KEY=VALUE" strings'))
            return
        for i, item in enumerate(items):
            key, sep, val = item.partition("=") if isinstance(item, str) else ("", "", "")
            if not sep or not key:
                errors.append(((*where, i), f'must be "KEY=VALUE" (got {_describe(item)})'))
                continue
            label = ".".join(map(str, where)) or "list"
            if key in result and result[key] != val and origin[key] != label:
                errors.append(
                    (
                        (*where, i),
                        f'"{key}" differs from its value for {origin[key]}; '
                        "Epochal sets the same variables on every device",
                    )
                )
                continue
            result[key], origin[key] = val, label

    if value is None:
        return {}
    if _is_per_device(value):
        for device in sorted(value):
            if value[device] is not None:
                add_list(value[device], (device,))
    elif isinstance(value, list):
        add_list(value, ())
    elif isinstance(value, dict):
        for key, val in value.items():
            text = _env_value(val)
            if not isinstance(key, str) or not key or "=" in key:
                errors.append(((str(key),), "must be a variable name"))
            elif text is None:
                errors.append(((key,), f"must be a string or a number (got {_describe(val)})"))
            else:
                result[key] = text
    else:
        return value  # the strict dict type reports it
    if errors:
        raise _fail(*errors)
    return result


class EnvironmentConfig(_Model):
    # One image, or Determined's image per device type ({cpu: ..., cuda: ...}), which the
    # Docker runtime picks from by the run's slots.
    image: str | dict[str, str] | None = None
    environment_variables: dict[str, str] = Field(default_factory=dict)
    force_pull_image: bool = False  # pull the image even when the agent has it
    pod_spec: NotActedOn = None
    ports: NotActedOn = None
    registry_auth: NotActedOn = None
    add_capabilities: NotActedOn = None
    drop_capabilities: NotActedOn = None
    proxy_ports: NotActedOn = None

    @field_validator("image", mode="before")
    @classmethod
    def _one_image(cls, value: Any) -> Any:
        if value is None or isinstance(value, str):
            return value
        if not _is_per_device(value):
            raise _fail(
                (
                    (),
                    "must be an image name or a mapping of "
                    f"{_choices(sorted(_DEVICE_KEYS))} to image names (got {_describe(value)})",
                )
            )
        bad = [(k, v) for k, v in value.items() if v is not None and not isinstance(v, str)]
        if bad:
            raise _fail(*(((k,), f"must be an image name (got {_describe(v)})") for k, v in bad))
        images = {v for v in value.values() if v is not None}
        if len(images) > 1:
            return {k: v for k, v in value.items() if v is not None}
        return images.pop() if images else None

    @field_validator("environment_variables", mode="before")
    @classmethod
    def _env_to_dict(cls, value: Any) -> Any:
        return _normalize_env(value)


class BindMount(_Model):
    host_path: str = Field(min_length=1)
    container_path: str = Field(min_length=1)
    read_only: bool = False
    propagation: NotActedOn = None

    @field_validator("host_path")
    @classmethod
    def _absolute_host_path(cls, value: str) -> str:
        if not value.startswith("/"):
            raise _fail(((), f"must be an absolute path (got {_describe(value)})"))
        return value

    @field_validator("container_path")
    @classmethod
    def _not_the_working_directory(cls, value: str) -> str:
        if value == ".":
            raise _fail(((), 'must not be "." (the trial\'s working directory)'))
        return value


class ReproducibilityConfig(_Model):
    experiment_seed: int | None = Field(default=None, ge=0)


# --- the experiment -----------------------------------------------------------------------------


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


# --- Determined's view --------------------------------------------------------------------------

# Defaults Determined's master writes into every config (schemas/expconf/v0) that Determined's own
# harness reads without a fallback (determined/exec/harness.py: PyTorchTrial, DeepSpeedTrial).
_DETERMINED_DEFAULTS: dict[str, Any] = {
    "min_validation_period": {"batches": 0},
    "min_checkpoint_period": {"batches": 0},
    "scheduling_unit": 100,
    "checkpoint_policy": "best",
    "perform_initial_validation": False,
    "records_per_epoch": 0,
    "debug": False,
    "profiling": {
        "enabled": False,
        "begin_on_batch": 0,
        "end_after_batch": None,
        "sync_timings": True,
    },
    "optimizations": {
        "aggregation_frequency": 1,
        "auto_tune_tensor_fusion": False,
        "average_aggregated_gradients": True,
        "average_training_metrics": True,
        "gradient_compression": False,
        "grad_updates_size_file": None,
        "mixed_precision": "O0",
        "tensor_fusion_cycle_time": 1,
        "tensor_fusion_threshold": 64,
    },
}


_MERGED_DEFAULTS = frozenset({"profiling", "optimizations"})  # sections, not lengths


def with_determined_defaults(config: Mapping[str, Any]) -> dict[str, Any]:
    """A normalized config with Determined's defaults where it leaves a field out (or null),
    as Determined's master hands configs to its harness (`profiling` and `optimizations` are
    completed key by key)."""
    filled: dict[str, Any] = json.loads(json.dumps(dict(config)))
    for name, default in _DETERMINED_DEFAULTS.items():
        given = filled.get(name)
        if given is None:
            filled[name] = json.loads(json.dumps(default))
        elif name in _MERGED_DEFAULTS and isinstance(given, dict):
            filled[name] = {**default, **given}
    return filled


# --- warnings -----------------------------------------------------------------------------------


def _asks_for_something(value: Any) -> bool:
    """False for values that switch a feature off (`debug: false`, `profiling: {enabled:
    false}`, empty): leaving those undone changes nothing, so they earn no warning."""
    if value is None or value is False or value in ({}, [], ""):
        return False
    return not (isinstance(value, dict) and value.get("enabled") is False)


# Fields Epochal's master does not act on but Determined's own training loops in the trial do
# (PyTorchTrial, TFKerasTrial and DeepSpeedTrial read them from the config they are given).
_READ_BY_DETERMINED_TRAINING_LOOPS = frozenset({
    ("records_per_epoch",), ("scheduling_unit",), ("perform_initial_validation",),
    ("checkpoint_policy",), ("optimizations",),
})


def _unused_field_warning(path: Path) -> str:
    if path in _READ_BY_DETERMINED_TRAINING_LOOPS:
        return ("kept for Determined's training loops in the trial (PyTorchTrial and the"
                " like read it), but Epochal itself does not act on it")
    return "accepted and kept, but Epochal does not act on it"


def config_warnings(config: ExperimentConfig) -> list[str]:
    """What a valid config asks for that Epochal will not do, one line per field, by path.

    Determined's fields that Epochal keeps but does not act on, and storage only Determined's
    Core API writes (S3), so a Determined user sees what differs instead of finding out later.
    """
    found: list[str] = []

    def walk(model: BaseModel, path: Path) -> None:
        if isinstance(model, _Model):
            for name in sorted(model._determined_only):
                if _asks_for_something(getattr(model, name)):
                    found.append(_join((*path, name), _unused_field_warning((*path, name))))
        for name in type(model).model_fields:
            value = getattr(model, name)
            if isinstance(value, BaseModel):
                walk(value, (*path, name))
            elif isinstance(value, list):
                for i, item in enumerate(value):
                    if isinstance(item, BaseModel):
                        walk(item, (*path, name, i))

    walk(config, ())
    return found


# --- parsing and reporting ----------------------------------------------------------------------


class _OverBound(yaml.MarkedYAMLError):
    """YAML over one of the config bounds (depth, values)."""


class _Loader(yaml.SafeLoader):
    """Safe YAML that rejects a key given twice in one mapping (YAML would keep the last),
    nesting deeper than MAX_CONFIG_DEPTH, and more than MAX_CONFIG_VALUES values once aliases
    are expanded (a few hundred bytes of nested aliases, "billion laughs", expand to billions)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self._depth >= MAX_CONFIG_DEPTH:
            raise _OverBound(None, None, f"nested deeper than {MAX_CONFIG_DEPTH} levels",
                             self.peek_event().start_mark)  # type: ignore[no-untyped-call]
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_document(self, node: yaml.Node) -> Any:
        values, depth = _expanded_extent(node)
        if values > MAX_CONFIG_VALUES:
            raise _OverBound(None, None, f"more than {MAX_CONFIG_VALUES:,} values once YAML "
                             "aliases are expanded (or an alias that contains itself)",
                             node.start_mark)
        if depth > MAX_CONFIG_DEPTH:
            raise _OverBound(None, None, f"nested deeper than {MAX_CONFIG_DEPTH} levels once "
                             "YAML aliases are expanded", node.start_mark)
        return super().construct_document(node)


def _expanded_extent(root: yaml.Node) -> tuple[int, int]:
    """(values, depth) of the document with every alias expanded, counted once per node: an
    alias is the node it names, so memoizing by identity keeps this linear in the text."""
    seen: dict[int, tuple[int, int]] = {}

    def extent(node: yaml.Node) -> tuple[int, int]:
        key = id(node)
        if key in seen:
            return seen[key]
        seen[key] = (MAX_CONFIG_VALUES + 1, 0)  # an alias inside its own anchor: refused
        children: list[yaml.Node] = []
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        values, depth = 1, 0
        for child in children:
            child_values, child_depth = extent(child)
            values, depth = values + child_values, max(depth, child_depth)
            if values > MAX_CONFIG_VALUES or depth >= MAX_CONFIG_DEPTH:
                break  # already over a bound; the rest need not be counted
        seen[key] = (values, depth + 1)
        return seen[key]

    return extent(root)


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node)
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:
            continue  # unhashable: construct_mapping reports it
        if duplicate:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {key!r}",
                key_node.start_mark,
            )
    mapping: dict[Any, Any] = loader.construct_mapping(node)
    return mapping


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_experiment_config(
    text: str, source: str = "config", default_storage: Mapping[str, Any] | None = None
) -> ExperimentConfig:
    """Parse and validate a YAML experiment config; ``source`` names it in error messages.

    With ``default_storage`` (the master's checkpoint storage), the config's storage is filled
    from it as ``with_default_storage`` says.
    """
    data = load_config_yaml(text, source)
    bounds_errors = _search_bounds_errors(data)
    if bounds_errors:
        raise ConfigError(bounds_errors, source)
    if default_storage is not None:
        data = with_default_storage(data, default_storage)
    return validate_experiment_config(data, source)


def load_config_yaml(text: str, source: str = "config") -> Any:
    """The YAML text of a config (or of part of one) as data, within the size, depth and value
    bounds; raises ConfigError naming the bound or the line and column of a syntax error."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_CONFIG_BYTES:
        raise ConfigError([f"{source}: {size:,} bytes, more than the {MAX_CONFIG_BYTES:,} "
                           "accepted"], source, "too large")
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        where = f"{source}, line {mark.line + 1}, column {mark.column + 1}" if mark else source
        summary = "over a limit" if isinstance(exc, _OverBound) else "not valid YAML"
        raise ConfigError([f"{where}: {problem}"], source, summary) from None


def _search_bounds_errors(data: Any) -> list[str]:
    """How far the config's search is over the bounds on hyperparameters and trials, and
    searches that cannot be meant (checked at parse time only, so stored configs replay)."""
    if not isinstance(data, dict):
        return []
    errors = []
    hyperparameters = data.get("hyperparameters")
    if isinstance(hyperparameters, dict):
        count = _count_hyperparameters(hyperparameters)
        if count > MAX_HYPERPARAMETERS:
            errors.append(f"hyperparameters: {count:,} hyperparameters, more than the "
                          f"{MAX_HYPERPARAMETERS:,} accepted")
        errors.extend(_degenerate_log_bases(hyperparameters, "hyperparameters"))
    searcher = data.get("searcher")
    max_trials = searcher.get("max_trials") if isinstance(searcher, dict) else None
    if isinstance(max_trials, int) and max_trials > MAX_TRIALS:
        errors.append(f"searcher.max_trials: {max_trials:,} trials, more than the "
                      f"{MAX_TRIALS:,} accepted")
    return errors


def _degenerate_log_bases(group: Mapping[str, Any], path: str) -> list[str]:
    """`type: log` with `base: 1` gives every trial 1 whatever the exponents: a mistake."""
    found = []
    for name, value in group.items():
        if isinstance(value, dict) and "type" not in value:
            found.extend(_degenerate_log_bases(value, f"{path}.{name}"))
        elif isinstance(value, dict) and value.get("type") == "log" and value.get("base") == 1:
            found.append(f"{path}.{name}.base: 1 makes every value 1 (1 to any power); use "
                         "another base, such as 10")
    return found


def _count_hyperparameters(group: Mapping[str, Any]) -> int:
    """Leaves of a hyperparameters mapping: a nested mapping without `type` is a group."""
    return sum(_count_hyperparameters(v) if isinstance(v, dict) and "type" not in v else 1
               for v in group.values())


PLACEHOLDER_STORAGE: dict[str, Any] = {"type": "shared_fs", "host_path": "/master/checkpoints"}
"""Stands for the master's default storage where it is unknown (the CLI's check before submit)."""


def with_default_storage(data: Any, default_storage: Mapping[str, Any]) -> Any:
    """The config with the master's default checkpoint storage filled in.

    No `checkpoint_storage` means the default; one that names no `type` refines it (Determined
    merges such a partial storage, e.g. `save_trial_best` alone, into the master's, and
    `det experiment create --test` sends one). Anything else is left for validation.
    """
    if not isinstance(data, dict):
        return data
    storage = data.get("checkpoint_storage")
    if storage is None:
        return {**data, "checkpoint_storage": dict(default_storage)}
    if isinstance(storage, dict) and "type" not in storage:
        return {**data, "checkpoint_storage": {**default_storage, **storage}}
    return data


def validate_experiment_config(data: Any, source: str = "config") -> ExperimentConfig:
    """Validate already-parsed config data; raises ConfigError listing every problem."""
    if data is None:
        raise ConfigError(["config: is empty"], source)
    if not isinstance(data, dict):
        raise ConfigError([f"config: must be a mapping of fields (got {_describe(data)})"], source)
    try:
        return ExperimentConfig.model_validate(data)
    except ValidationError as exc:
        errors = _format_errors(exc)
    for path, msg in _grid_errors_best_effort(data):
        line = _join(path, msg)
        if line not in errors:
            errors.append(line)
    raise ConfigError(errors, source)


_HYPERPARAMETERS = TypeAdapter(dict[str, Hyperparameter])


def _grid_errors_best_effort(data: dict[str, Any]) -> list[tuple[Path, str]]:
    """The grid checks, when only other parts of the config failed to validate."""
    searcher = data.get("searcher")
    if not isinstance(searcher, dict) or searcher.get("name") != "grid":
        return []
    try:
        hparams = _HYPERPARAMETERS.validate_python(data.get("hyperparameters") or {})
    except ValidationError:
        return []
    return _grid_errors(hparams)


def _join(path: Path, message: str) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return f"{text or 'config'}: {message}"


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        text = json.dumps(value)
        return text if len(text) <= 40 else text[:36] + '..."'
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _choices(names: Any) -> str:
    return ", ".join(f'"{n}"' for n in names)


# Why Epochal refuses what Determined 0.38's schema names but Epochal cannot honour.
_REFUSED = {
    "custom": "Determined 0.38 removed custom searchers (searcher operations in the training "
    "code) and Epochal keeps search decisions in the master; use grid, random or adaptive_asha",
    "adaptive": "is an end-of-life Determined searcher its master refuses; use adaptive_asha",
    "adaptive_simple": "is an end-of-life Determined searcher its master refuses; use "
    "adaptive_asha",
    "sync_halving": "is an end-of-life Determined searcher its master refuses; use "
    "async_halving",
    "gcs": "Epochal keeps checkpoints on a shared filesystem or S3 only (its checkpoint GC "
    "and restores cannot reach GCS)",
    "azure": "Epochal keeps checkpoints on a shared filesystem or S3 only (its checkpoint GC "
    "and restores cannot reach Azure Blob Storage)",
    "directory": "Epochal's master and agents cannot know which host directory a container's "
    'directory is; use "shared_fs" with the host_path every agent mounts',
}


def _union_message(
    value: Any, key: str, kind: str, names: Any, extra: str = ""
) -> tuple[Path, str]:
    if not isinstance(value, dict):
        return (), f"must be a mapping (got {_describe(value)})"
    if key not in value:
        return (key,), "field required"
    got = value[key]
    if isinstance(got, str) and got in _REFUSED:
        return (key,), f"{kind} {_describe(got)}: {_REFUSED[got]}"
    hint = _suggest(got, list(names)) if isinstance(got, str) else ""
    return (key,), f"unknown {kind} {_describe(got)}; must be one of {_choices(names)}{extra}{hint}"


_TYPE_NAMES = {
    "int_type": "an integer",
    "float_type": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}


def _friendly(err: Any) -> str:
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "missing":
        return "field required"
    if kind == "extra_forbidden":
        return value.message if isinstance(value, _UnknownField) else "unknown field"
    if kind in _TYPE_NAMES:
        return f"must be {_TYPE_NAMES[kind]} (got {_describe(value)})"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        op = {
            "greater_than_equal": ">=",
            "greater_than": ">",
            "less_than_equal": "<=",
            "less_than": "<",
        }[kind]
        bound = next(iter(ctx.values()))
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)
        return f"must be {op} {bound} (got {_describe(value)})"
    if kind in ("string_too_short", "too_short"):
        return "must not be empty"
    if kind == "literal_error":
        return f"must be {ctx.get('expected')} (got {_describe(value)})"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    return str(err["msg"])


def _format_errors(exc: ValidationError) -> list[str]:
    lines: list[str] = []
    for err in exc.errors(include_url=False):
        loc: Path = tuple(
            part
            for part in err["loc"]
            if not (isinstance(part, str) and part.startswith("<") and part.endswith(">"))
            and part != "[key]"
        )
        kind, value = err["type"], err.get("input")
        found: list[tuple[Path, str]]
        if kind == _EXPCONF_ERROR:
            found = [(loc + tuple(p), m) for p, m in err["ctx"]["errors"]]
        elif kind == "searcher_name":
            sub, msg = _union_message(value, "name", "searcher", SEARCHER_CONFIGS)
            found = [(loc + sub, msg)]
        elif kind == "storage_type":
            sub, msg = _union_message(value, "type", "checkpoint storage type", _STORAGE_TYPES)
            found = [(loc + sub, msg)]
        elif kind == "hyperparameter_type":
            extra = ' (or no "type" for a group of hyperparameters)'
            sub, msg = _union_message(value, "type", "hyperparameter type", _HP_TYPES, extra)
            found = [(loc + sub, msg)]
        elif err["loc"] and err["loc"][-1] == "[key]":
            found = [(loc[:-1] + (str(loc[-1]),), "names must be strings")]
        else:
            found = [(loc, _friendly(err))]
        for path, msg in found:
            line = _join(path, msg)
            if line not in lines:
                lines.append(line)
    return lines
