"""What every part of the config model is built from: the bounds on a config, `ConfigError`,
the strict base model (`_Model`, with Determined's fields kept but not acted on) and the
helpers that word errors (`_fail`, `_join`, `_describe`)."""

import difflib
import json
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

MAX_GRID_SIZE = 100_000
"""The largest grid search accepted: one trial per point."""

# Bounds on what a config may ask of the master, checked where its text is parsed (so a config
# stored before a bound changed still replays): Determined's own example configs are under 3 KiB.
MAX_CONFIG_BYTES = 64 * 1024
MAX_CONFIG_DEPTH = 32  # nested mappings and lists
MAX_CONFIG_VALUES = 20_000  # counted with YAML aliases expanded, as validation sees them
MAX_HYPERPARAMETERS = 1_000
MAX_TRIALS = MAX_GRID_SIZE

# Error type of checks that report one or more problems below the location that raised them;
# the context's "errors" holds (relative path, message) pairs.
_EXPCONF_ERROR = "expconf"

Path = tuple[str | int, ...]


class ConfigError(Exception):
    """An experiment config that cannot be used; ``errors`` lists every problem found.

    Each error reads ``path.to.field: message`` (list items as ``field[2]``), except a YAML syntax
    error, which names the source and the line and column instead.
    """

    def __init__(self, errors: list[str], source: str = "config", summary: str | None = None):
        self.errors = list(errors)
        self.source = source
        count = len(self.errors)
        self.summary = summary or (
            f"the experiment config has {count} error{'s' if count != 1 else ''}"
        )
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join([f"{self.source}: {self.summary}:", *(f"  {e}" for e in self.errors)])


def _fail(*errors: tuple[Path, str]) -> PydanticCustomError:
    """An error to raise from a validator, located at (relative) paths below it."""
    return PydanticCustomError(
        _EXPCONF_ERROR,
        "{summary}",
        {"summary": "; ".join(_join(path, msg) for path, msg in errors), "errors": list(errors)},
    )


class _UnknownField:
    """Stands in for the value of an unknown key, carrying the message to report for it."""

    def __init__(self, message: str):
        self.message = message


def _suggest(word: str, choices: Iterator[str] | list[str]) -> str:
    match = difflib.get_close_matches(word, list(choices), n=1)
    return f'; did you mean "{match[0]}"?' if match else ""


def _is_plain_data(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, list):
        return all(_is_plain_data(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain_data(v) for k, v in value.items())
    return False


def _check_plain_data(value: Any) -> Any:
    if not _is_plain_data(value):
        raise ValueError(
            "must be plain data (strings, numbers, booleans, null, lists and mappings with "
            "string keys); quote values such as dates"
        )
    return value


class _NotActedOnMarker:
    def __repr__(self) -> str:
        return "NotActedOn"


_NOT_ACTED_ON = _NotActedOnMarker()


class _DumpedWhenGivenMarker:
    def __repr__(self) -> str:
        return "DumpedWhenGiven"


# Marks a field Epochal acts on but leaves out of dumps when null (added after configs were
# stored: their normalized form stays as it was).
_DUMPED_WHEN_GIVEN = _DumpedWhenGivenMarker()


class _Model(BaseModel):
    """Strict types (no "5" for 5), no unknown keys, and null meaning "the default".

    ``_determined_only`` names the fields declared ``NotActedOn``: Determined's fields that
    Epochal accepts and keeps (default null) but does not act on. ``config_warnings`` names each
    one given, and dumps leave out those not given (and the null ``_DUMPED_WHEN_GIVEN`` fields),
    so normalized configs stay as they were.
    """

    model_config = ConfigDict(extra="forbid", strict=True)
    _determined_only: ClassVar[frozenset[str]] = frozenset()
    _omitted_when_null: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        fields = cls.model_fields.items()
        cls._determined_only = frozenset(
            name for name, field in fields if _NOT_ACTED_ON in field.metadata
        )
        cls._omitted_when_null = cls._determined_only | frozenset(
            name for name, field in fields if _DUMPED_WHEN_GIVEN in field.metadata
        )

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            for name in self._omitted_when_null:
                if data.get(name) is None:
                    data.pop(name, None)
        return data

    @model_validator(mode="before")
    @classmethod
    def _prepare(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        prepared: dict[Any, Any] = {}
        for key, value in data.items():
            field = fields.get(key) if isinstance(key, str) else None
            if field is None:
                # extra="forbid" reports it; the marker tells the report what to say.
                prepared[key] = _UnknownField(cls._unknown_field_message(str(key)))
            elif value is None and not field.is_required() and field.get_default() is not None:
                continue  # Determined treats null as "not given"
            else:
                prepared[key] = value
        return prepared

    @classmethod
    def _unknown_field_message(cls, key: str) -> str:
        return "unknown field" + _suggest(key, list(cls.model_fields))




PlainData = Annotated[Any, AfterValidator(_check_plain_data)]
# A Determined field Epochal keeps but does not act on (any plain data; see _Model). The marker
# is how _Model finds them.
NotActedOn = Annotated[Any, AfterValidator(_check_plain_data), _NOT_ACTED_ON]


def _keyed_tag(key: str, choices: Mapping[str, Any] | tuple[str, ...]) -> Any:
    def tag(value: Any) -> str | None:
        kind = value.get(key) if isinstance(value, dict) else getattr(value, key, None)
        return f"<{kind}>" if isinstance(kind, str) and kind in choices else None

    return tag



def _join(path: Path, message: str) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return f"{text or 'config'}: {message}"


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        text = json.dumps(value)
        return text if len(text) <= 40 else text[:36] + '..."'
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _choices(names: Any) -> str:
    return ", ".join(f'"{n}"' for n in names)


