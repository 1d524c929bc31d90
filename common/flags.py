"""Yes/no settings from the environment, read one way everywhere: `1`, `true`, `yes`, `on`
(any case) are yes; unset, empty, `0`, `false`, `no`, `off` are no."""

from __future__ import annotations

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"", "0", "false", "no", "off"})


class FlagError(ValueError):
    """A yes/no setting holding neither; the message names the variable."""


def flag(name: str, value: str | None) -> bool:
    """The setting `name` (for the error) whose text is `value`."""
    word = (value or "").strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise FlagError(f"{name}: expected true or false, got {value!r}")
