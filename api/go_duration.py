"""Go's duration strings, which Determined's client sends (`det token create -e` as "720h",
`det master cluster-message set -d 24h`): units ns, us, ms, s, m, h, and the d and w the
CLI's help suggests, as in "1h30m" or "1.5h". Read as a timedelta within a bound."""

from __future__ import annotations

import re
from datetime import timedelta

from api.errors import ApiError

_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h|d|w)")
_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0,
            "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
MAX_TEXT = 64


def parse(field: str, text: str, *, longest: timedelta) -> timedelta:
    """`text` as a duration of 0 up to `longest`; else a 400 naming `field`."""
    value = text.strip()
    parts = _PART.findall(value) if len(value) <= MAX_TEXT else []
    if value == "0":
        return timedelta(0)
    if not parts or "".join(n + u for n, u in parts) != value:
        raise ApiError(400, f"bad {field}", [
            f"{field}: expected a positive Go duration such as 24h, 90m or 1h30m "
            f"(units ns, us, ms, s, m, h, d, w), got {text[:MAX_TEXT]!r}"])
    seconds = sum(float(n) * _SECONDS[u] for n, u in parts)
    if seconds > longest.total_seconds():
        raise ApiError(400, f"bad {field}", [
            f"{field}: at most {_days(longest)} days, got {text!r}"])
    return timedelta(seconds=seconds)


def _days(span: timedelta) -> str:
    days = span.total_seconds() / 86400
    return str(int(days)) if days == int(days) else f"{days:.2f}"
