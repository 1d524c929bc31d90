"""The grid searcher: one trial per point of the cartesian product of every hyperparameter's axis.

Axes are taken in sorted hyperparameter path order and the first axis varies slowest, as in
Determined's grid searcher.
"""

import copy
import itertools
from collections.abc import Mapping
from typing import Any

from common.expconf import MAX_GRID_SIZE, hyperparameters_grid_size, iter_hyperparameters
from workflows.searchers.hparams import grid_values, nest

__all__ = ["grid_trials"]


def grid_trials(hparams: Mapping[str, Any]) -> list[dict[str, Any]]:
    size = hyperparameters_grid_size(hparams)
    if size > MAX_GRID_SIZE:
        raise ValueError(f"the grid has {size:,} points, more than {MAX_GRID_SIZE:,}")
    axes = [(path, grid_values(hp)) for path, hp in iter_hyperparameters(hparams)]
    paths = [path for path, _ in axes]
    return [
        nest(zip(paths, _copies(point), strict=True))
        for point in itertools.product(*(values for _, values in axes))
    ]


def _copies(point: tuple[Any, ...]) -> list[Any]:
    # Trials must not share list/dict values with each other.
    return [copy.deepcopy(v) if isinstance(v, (list, dict)) else v for v in point]
