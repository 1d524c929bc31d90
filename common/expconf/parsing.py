"""Reading a config: YAML within bounds, validation against the model, and every error
worded as `path.to.field: message` at once."""

import math
from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import TypeAdapter, ValidationError

from common.expconf._base import (
    _EXPCONF_ERROR,
    MAX_CONFIG_BYTES,
    MAX_CONFIG_DEPTH,
    MAX_CONFIG_VALUES,
    MAX_HYPERPARAMETERS,
    MAX_TRIALS,
    ConfigError,
    Path,
    _choices,
    _describe,
    _join,
    _suggest,
    _UnknownField,
)
from common.expconf.experiment import ExperimentConfig

# HyperparameterGroup: pydantic resolves the forward reference inside `Hyperparameter` here.
from common.expconf.hyperparameters import (
    _HP_TYPES,
    Hyperparameter,
    HyperparameterGroup,  # noqa: F401
    _grid_errors,
)
from common.expconf.searchers import SEARCHER_CONFIGS
from common.expconf.storage import _STORAGE_TYPES


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
    return parse_experiment_data(load_config_yaml(text, source), source, default_storage)


def parse_experiment_data(
    data: Any, source: str = "config", default_storage: Mapping[str, Any] | None = None
) -> ExperimentConfig:
    """``parse_experiment_config`` of data already read from its YAML text (by
    ``load_config_yaml``, within its bounds): the search bounds, the default storage, then
    validation."""
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
    """`type: log` with a base that gives no range of values (1, infinite, not a number) and
    ranges with an infinite end: mistakes, which would otherwise sample nonsense."""
    found = []
    for name, value in group.items():
        where = f"{path}.{name}"
        if isinstance(value, dict) and "type" not in value:
            found.extend(_degenerate_log_bases(value, where))
            continue
        if not isinstance(value, dict) or value.get("type") not in ("log", "double"):
            continue
        base = value.get("base")
        if value["type"] == "log" and base == 1:
            found.append(f"{where}.base: 1 makes every value 1 (1 to any power); use "
                         "another base, such as 10")
        elif value["type"] == "log" and isinstance(base, float) and not math.isfinite(base):
            found.append(f"{where}.base: must be a finite number greater than 0 and not 1, "
                         f"got {base}")
        found.extend(f"{where}.{end}: must be a finite number, got {value[end]}"
                     for end in ("minval", "maxval")
                     if isinstance(value.get(end), float) and not math.isfinite(value[end]))
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


def stored_config(data: Mapping[str, Any]) -> ExperimentConfig:
    """A config the API stored (validated and normalised at submission) as the model again, for
    the parts that run it: trusted input, so no warnings, error report or grid checks here."""
    return ExperimentConfig.model_validate(data)


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
