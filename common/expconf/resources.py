"""`resources`: slots, pool, priority, weight and memory sizes."""

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, field_validator

from common.expconf._base import _DUMPED_WHEN_GIVEN, NotActedOn, _describe, _fail, _Model
from common.temporal_names import DEFAULT_RESOURCE_POOL

# Bytes of /dev/shm in a task container when `shm_size` is not given (Determined's default). It
# is applied where a run is specified (wire/run_spec.py), not stored in the config.
DEFAULT_SHM_SIZE = 4 * 1024**3

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


