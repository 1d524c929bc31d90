"""Hyperparameters (const, int, double, log, categorical, nested groups) and grid sizes."""

import math
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    Discriminator,
    Field,
    RootModel,
    Tag,
    model_validator,
)

from common.expconf._base import MAX_GRID_SIZE, Path, PlainData, _fail, _Model

_HP_TYPES = ("const", "int", "double", "log", "categorical")


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


