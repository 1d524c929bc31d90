"""Determined's view of a config: the defaults its harness expects, and warnings for
the fields Epochal keeps but does not act on."""

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from common.expconf._base import Path, _join, _Model
from common.expconf.experiment import ExperimentConfig

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


