"""The searcher sections: single, grid, random, async_halving, adaptive_asha and optuna."""

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from common.expconf._base import _NOT_ACTED_ON, _fail, _keyed_tag, _Model
from common.expconf.lengths import SearcherLength


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

    @property
    def length_unit(self) -> str:
        """What the searcher's lengths count: the max_length unit. Without one (the training
        code decides) trials get no target, and "batches" names nothing."""
        return self.max_length.unit if self.max_length is not None else "batches"

    @property
    def total_length(self) -> int:
        """The whole length a trial trains to; 0 without one."""
        return self.max_length.value if self.max_length is not None else 0

    @property
    def waits_at_rung(self) -> bool:
        """Whether a trial that reached its target waits there for the searcher's decision
        (classic ASHA) instead of ending."""
        return False

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


class SamplerConfig(_Model):
    """Model-based sampling of new trials' hyperparameters (Epochal's, not Determined's):
    Optuna's sampler `name`, built with `options` as its constructor's keywords (e.g. TPE's
    `n_startup_trials`, `multivariate`), fitted on what the experiment's trials reported."""

    name: Literal["tpe", "cmaes", "gp", "qmc", "random"] = "tpe"
    # Checked against the sampler's keywords by the API (activities/model_sampling.py), where
    # Optuna is imported.
    options: dict[str, Any] = Field(default_factory=dict)


class OptunaConfig(_SearcherBase):
    """``max_trials`` trials whose hyperparameters Optuna's `sampler` draws, each from what the
    trials before it reported; every trial trains to `max_length` (ASHA's `sampler` field
    combines such sampling with ASHA's early stopping)."""

    name: Literal["optuna"] = "optuna"
    max_trials: int = Field(ge=1)
    max_concurrent_trials: int = Field(default=16, ge=0)
    sampler: SamplerConfig = Field(default_factory=SamplerConfig)


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
    # New trials' hyperparameters from a model of the reports so far; None: at random.
    sampler: SamplerConfig | None = None

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

    @property
    def waits_at_rung(self) -> bool:
        return not self.stop_once


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
    "optuna": OptunaConfig,
}
_ALL_SEARCHER_FIELDS = frozenset(f for c in SEARCHER_CONFIGS.values() for f in c.model_fields)


SearcherConfig = Annotated[
    Annotated[SingleConfig, Tag("<single>")]
    | Annotated[GridConfig, Tag("<grid>")]
    | Annotated[RandomConfig, Tag("<random>")]
    | Annotated[AsyncHalvingConfig, Tag("<async_halving>")]
    | Annotated[AdaptiveAshaConfig, Tag("<adaptive_asha>")]
    | Annotated[OptunaConfig, Tag("<optuna>")],
    Discriminator(
        _keyed_tag("name", SEARCHER_CONFIGS),
        custom_error_type="searcher_name",
        custom_error_message="unknown searcher",
    ),
]


