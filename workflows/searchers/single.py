"""The single searcher: one trial, each hyperparameter at its default value.

Determined's single searcher draws that one trial at random; Epochal takes the middle of every
range and the first category instead, so the trial is predictable from the config alone.
"""

from collections.abc import Mapping
from typing import Any

from workflows.searchers.hparams import default_hparams

__all__ = ["single_trials"]


def single_trials(hparams: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [default_hparams(hparams)]
