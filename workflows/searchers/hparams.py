"""Values of single hyperparameters: the middle value, the grid axis, a random sample.

Pure and deterministic (they run inside Temporal workflows): randomness comes only from the
``random.Random`` passed in, and values are deep copies, never shared with the config.
"""

import copy
import math
import random
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from common.expconf import (
    CategoricalHyperparameter,
    ConstHyperparameter,
    DoubleHyperparameter,
    HyperparameterGroup,
    IntHyperparameter,
    LogHyperparameter,
    iter_hyperparameters,
)

__all__ = [
    "default_hparams",
    "default_value",
    "grid_values",
    "nest",
    "sample_hparams",
    "sample_value",
]


def _round_half_away(x: Fraction) -> int:
    """Round like Go's math.Round (halves away from zero), as Determined's grid does."""
    n = math.floor(abs(x) + Fraction(1, 2))
    return n if x >= 0 else -n


def default_value(hp: Any) -> Any:
    """The middle of a range (Determined's one-point grid), a const's value, the first category."""
    if isinstance(hp, ConstHyperparameter):
        return copy.deepcopy(hp.val)
    if isinstance(hp, IntHyperparameter):
        return _round_half_away(Fraction(hp.minval + hp.maxval, 2))
    if isinstance(hp, DoubleHyperparameter):
        return (hp.minval + hp.maxval) / 2.0
    if isinstance(hp, LogHyperparameter):
        return hp.base ** ((hp.minval + hp.maxval) / 2.0)
    if isinstance(hp, CategoricalHyperparameter):
        return copy.deepcopy(hp.vals[0])
    if isinstance(hp, HyperparameterGroup):
        return default_hparams(hp.root)
    raise TypeError(f"not a hyperparameter: {hp!r}")


def grid_values(hp: Any) -> list[Any]:
    """The points of one grid axis, in increasing order of the range (categories as given).

    ``count`` points evenly spaced from ``minval`` to ``maxval`` inclusive (one point: the
    middle); an int range gives at most its number of distinct integers.
    """
    if isinstance(hp, IntHyperparameter):
        count = _count(hp)
        count = min(count, hp.maxval - hp.minval + 1)
        if count == 1:
            return [default_value(hp)]
        span = hp.maxval - hp.minval
        values = [_round_half_away(hp.minval + Fraction(i * span, count - 1)) for i in range(count)]
        return list(dict.fromkeys(values))
    if isinstance(hp, DoubleHyperparameter):
        return [float(x) for x in _spaced(hp.minval, hp.maxval, _count(hp))]
    if isinstance(hp, LogHyperparameter):
        return [hp.base**x for x in _spaced(hp.minval, hp.maxval, _count(hp))]
    if isinstance(hp, CategoricalHyperparameter):
        return copy.deepcopy(hp.vals)
    return [default_value(hp)]  # const, or an empty group


def _count(hp: IntHyperparameter | DoubleHyperparameter | LogHyperparameter) -> int:
    if hp.count is None:
        raise ValueError(f"a {hp.type} hyperparameter needs a count for grid search")
    return hp.count


def _spaced(minval: float, maxval: float, count: int) -> list[float]:
    if count == 1:
        return [(minval + maxval) / 2.0]
    return [minval + i * (maxval - minval) / (count - 1) for i in range(count)]


def sample_value(hp: Any, rng: random.Random) -> Any:
    """A random value: ints uniform on [minval, maxval], doubles uniform, log-uniform for log."""
    if isinstance(hp, ConstHyperparameter):
        return copy.deepcopy(hp.val)
    if isinstance(hp, IntHyperparameter):
        return rng.randint(hp.minval, hp.maxval)
    if isinstance(hp, DoubleHyperparameter):
        return rng.uniform(hp.minval, hp.maxval)
    if isinstance(hp, LogHyperparameter):
        return hp.base ** rng.uniform(hp.minval, hp.maxval)
    if isinstance(hp, CategoricalHyperparameter):
        return copy.deepcopy(rng.choice(hp.vals))
    if isinstance(hp, HyperparameterGroup):
        return sample_hparams(hp.root, rng)
    raise TypeError(f"not a hyperparameter: {hp!r}")


def nest(pairs: Iterable[tuple[tuple[str, ...], Any]]) -> dict[str, Any]:
    """``[(("a", "b"), 1)]`` -> ``{"a": {"b": 1}}``."""
    out: dict[str, Any] = {}
    for path, value in pairs:
        node = out
        for name in path[:-1]:
            node = node.setdefault(name, {})
        node[path[-1]] = value
    return out


def default_hparams(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """Every hyperparameter's default value, nested like the config."""
    return nest((path, default_value(hp)) for path, hp in iter_hyperparameters(hparams))


def sample_hparams(hparams: Mapping[str, Any], rng: random.Random) -> dict[str, Any]:
    """One random draw of every hyperparameter, in sorted name order (so key order is moot)."""
    return nest((path, sample_value(hp, rng)) for path, hp in iter_hyperparameters(hparams))
