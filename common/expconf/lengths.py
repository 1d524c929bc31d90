"""Training lengths: `{batches: N}`, `{records: N}` or `{epochs: N}`."""

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_serializer, model_validator

from common.expconf._base import _fail, _Model

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


