"""RunSpecs as the master builds them, for tests of the agent's parts that take a launch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from common.expconf import stored_config
from wire.run_spec import RunSpec

# What every experiment config has; a test gives only what it is about.
MINIMAL_CONFIG: dict[str, Any] = {
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss"},
}


def full_config(config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`config` with what it leaves out of a valid experiment config filled in."""
    return {**MINIMAL_CONFIG, **(config or {})}


def spec_of(config: Mapping[str, Any] | None = None) -> RunSpec:
    """The RunSpec of a trial of `config` (completed by `full_config`), as its workflow sends."""
    full = full_config(config)
    return RunSpec.of(stored_config(full), full)
