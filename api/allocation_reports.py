"""`det resources raw|aggregated|allocations`: their inputs checked within bounds, and their
answers as Determined's JSON (v1ResourceAllocationRawEntry, v1ResourceAllocationAggregatedEntry)
and CSV (the columns Determined's master writes at /resources/allocation/...).

Bounds: a raw window of at most `MAX_WINDOW_DAYS` days holding at most `MAX_RAW_ALLOCATIONS`
allocations, at most `MAX_DAILY_PERIODS` days or `MAX_MONTHLY_PERIODS` months aggregated;
anything else is a 400 naming the field as the caller spelled it. Periods are UTC days or
months, each listed whether or not anything ran in it.
"""

from __future__ import annotations

import csv
import enum
import io
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from api.errors import ApiError
from api.views import rfc3339

MAX_WINDOW_DAYS = 366
MAX_DAILY_PERIODS = 366
MAX_MONTHLY_PERIODS = 120
MAX_RAW_ALLOCATIONS = 100_000
# A timestamp or date outside these years is a typo, not a report anyone wants (and the period
# after the last must exist).
YEARS = range(1970, 9999)


class Period(enum.StrEnum):
    """Determined's ResourceAllocationAggregationPeriod (also sent as its number)."""

    DAILY = "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY"
    MONTHLY = "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_MONTHLY"


_PERIOD_NUMBERS = {"1": Period.DAILY, "2": Period.MONTHLY}
# The groupings of an aggregated entry, by the SQL's aggregation_type (api/queries/resources.py).
GROUPINGS = {"username": "byUsername", "experiment_label": "byExperimentLabel",
             "resource_pool": "byResourcePool", "workspace": "byWorkspace"}


def _invalid(field: str, what: str) -> ApiError:
    return ApiError(400, f"invalid {field}", [f"{field}: {what}"])


def parse_timestamp(field: str, value: str) -> datetime:
    """An RFC 3339 timestamp (`2024-01-02T03:04:05Z`; an offset, or none for UTC)."""
    text = value.strip()
    try:
        when = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        raise _invalid(field, f"an RFC 3339 timestamp such as 2024-01-02T03:04:05Z,"
                       f" got {value[:64]!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    try:
        when = when.astimezone(UTC)
    except OverflowError:
        raise _invalid(field, f"out of range: {value[:64]!r}") from None
    if when.year not in YEARS:
        raise _invalid(field, f"a year from {YEARS.start} to {YEARS.stop - 1}, got {value[:64]!r}")
    return when


@dataclass(frozen=True)
class Named:
    """A query parameter as the caller named it (Determined's client sends snake_case, the
    gateway's schema says camelCase: either is taken)."""

    name: str
    value: str | None


def given(camel: str, camel_value: str | None, snake: str, snake_value: str | None) -> Named:
    if camel_value is not None:
        return Named(camel, camel_value)
    return Named(snake, snake_value)


def required(param: Named) -> str:
    if param.value is None or not param.value.strip():
        raise ApiError(400, f"{param.name} is required", [f"{param.name}: required"])
    return param.value


def raw_window(after: Named, before: Named) -> tuple[datetime, datetime]:
    """[after, before) within MAX_WINDOW_DAYS."""
    start = parse_timestamp(after.name, required(after))
    end = parse_timestamp(before.name, required(before))
    if start > end:
        raise _invalid(before.name, f"must not be before {after.name} ({rfc3339(start)})")
    if end - start > timedelta(days=MAX_WINDOW_DAYS):
        raise _invalid(before.name, f"at most {MAX_WINDOW_DAYS} days after {after.name}")
    return start, end


def parse_period(param: Named) -> Period:
    text = required(param).strip()
    if text in _PERIOD_NUMBERS:
        return _PERIOD_NUMBERS[text]
    for period in Period:
        if text in (period.value, period.name):
            return period
    raise _invalid(param.name, f"one of {', '.join(Period)}, got {text[:64]!r}")


_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_MONTH = re.compile(r"^\d{4}-\d{2}$")


def _parse_date(param: Named, period: Period) -> date:
    text = required(param).strip()
    daily = period is Period.DAILY
    form = "YYYY-MM-DD" if daily else "YYYY-MM"
    pattern = _DAY if daily else _MONTH
    if not pattern.match(text):
        raise _invalid(param.name, f"a date as {form} for {period.name.lower()} periods,"
                       f" got {text[:64]!r}")
    try:
        day = date.fromisoformat(text if daily else f"{text}-01")
    except ValueError:
        raise _invalid(param.name, f"not a date: {text!r}") from None
    if day.year not in YEARS:
        raise _invalid(param.name, f"a year from {YEARS.start} to {YEARS.stop - 1}, got {text!r}")
    return day


def _add_months(day: date, months: int) -> date:
    total = day.year * 12 + day.month - 1 + months
    return date(total // 12, total % 12 + 1, 1)


@dataclass(frozen=True)
class Window:
    """The periods to aggregate: from the one starting at `first` to the one at `last`."""

    first: date
    last: date
    period: Period

    @property
    def monthly(self) -> bool:
        return self.period is Period.MONTHLY

    def starts(self) -> list[date]:
        found, day = [], self.first
        while day <= self.last:
            found.append(day)
            day = _add_months(day, 1) if self.monthly else day + timedelta(days=1)
        return found

    def label(self, start: date) -> str:
        """Determined's periodStart: `YYYY-MM-DD`, or `YYYY-MM` for months."""
        return start.strftime("%Y-%m" if self.monthly else "%Y-%m-%d")


def aggregated_window(start: Named, end: Named, period: Named) -> Window:
    """The first and last day (or month) to include, within the bound of the period."""
    chosen = parse_period(period)
    first = _parse_date(start, chosen)
    last = _parse_date(end, chosen)
    if first > last:
        raise _invalid(end.name, f"must not be before {start.name} ({first.isoformat()})")
    if chosen is Period.DAILY:
        count, bound, unit = (last - first).days + 1, MAX_DAILY_PERIODS, "days"
    else:
        count = (last.year - first.year) * 12 + last.month - first.month + 1
        bound, unit = MAX_MONTHLY_PERIODS, "months"
    if count > bound:
        raise _invalid(end.name, f"at most {bound} {unit} from {start.name}, got {count}")
    return Window(first, last, chosen)


# -- answers -------------------------------------------------------------------------------------

def raw_entry(row: Mapping[str, Any]) -> dict[str, Any]:
    """Determined's v1ResourceAllocationRawEntry (`seconds`: held within the window, not times
    the slots, as Determined's) and Epochal's fields beside it. `kind` is the allocation's
    task type in lower case (`trial`, `command`, `notebook`, `shell`, `tensorboard`): Epochal
    records allocations, not Determined's workloads."""
    return {
        "kind": str(row["task_type"]).lower(),
        "startTime": rfc3339(row["start_time"]),
        "endTime": rfc3339(row["end_time"]),
        "experimentId": row["experiment_id"],
        "username": row["username"],
        "userId": row["user_id"],
        "labels": list(row["labels"] or []),
        "seconds": max(0.0, float(row["seconds"])),
        "slots": row["slots"],
        "allocationId": row["allocation_id"],
        "taskId": row["task_id"],
        "taskType": row["task_type"],
        "trialId": row["trial_id"],
        "workspaceId": row["workspace_id"],
        "workspaceName": row["workspace_name"],
        "resourcePool": row["resource_pool"],
        "agentIds": list(row["agent_ids"] or []),
    }


def aggregated_entries(window: Window, rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One v1ResourceAllocationAggregatedEntry per period of the window (with Epochal's
    `byWorkspace`, which Determined's client leaves alone), from the query's (period_start,
    aggregation_type, key, seconds) rows."""
    totals: dict[date, float] = {}
    groups: dict[date, dict[str, dict[str, float]]] = {
        start: {name: {} for name in GROUPINGS.values()} for start in window.starts()}
    for row in rows:
        start = row["period_start"]
        day = start.date() if isinstance(start, datetime) else start
        if day not in groups:
            continue
        seconds = max(0.0, float(row["seconds"]))
        if row["aggregation_type"] == "total":
            totals[day] = seconds
        elif row["aggregation_type"] in GROUPINGS:
            groups[day][GROUPINGS[row["aggregation_type"]]][row["key"]] = seconds
    return [{"periodStart": window.label(day), "period": window.period.value,
             "seconds": totals.get(day, 0.0), **by} for day, by in groups.items()]


# -- CSV, as Determined's master writes it --------------------------------------------------------

def _csv(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()


def _go_time(iso: str | None) -> str:
    """RFC 3339 with `Z`, as Go's time.RFC3339Nano writes UTC."""
    if iso is None:
        return ""
    when = datetime.fromisoformat(iso).astimezone(UTC)
    text = when.strftime("%Y-%m-%dT%H:%M:%S")
    if when.microsecond:
        text += f".{when.microsecond:06d}".rstrip("0")
    return text + "Z"


def _number(seconds: float) -> str:
    return f"{seconds:f}"


def raw_csv(entries: Iterable[Mapping[str, Any]]) -> str:
    """`det resources raw`: experiment_id,kind,username,labels,slots,start_time,end_time,seconds
    (labels joined with commas, a comma or backslash in one escaped with a backslash)."""
    def labels(values: Iterable[str]) -> str:
        return ",".join(v.replace("\\", "\\\\").replace(",", "\\,") for v in values)

    return _csv(
        ["experiment_id", "kind", "username", "labels", "slots", "start_time", "end_time",
         "seconds"],
        ([str(e["experimentId"] or 0), e["kind"], e["username"], labels(e["labels"]),
          str(e["slots"]), _go_time(e["startTime"]), _go_time(e["endTime"]),
          _number(e["seconds"])] for e in entries))


def aggregated_csv(entries: Iterable[Mapping[str, Any]]) -> str:
    """`det resources aggregated`: aggregation_type,aggregation_key,date,seconds, each period's
    labels, users, pools and workspaces, then its total."""
    kinds = [("experiment_label", "byExperimentLabel"), ("username", "byUsername"),
             ("resource_pool", "byResourcePool"), ("workspace", "byWorkspace")]
    rows: list[list[str]] = []
    for entry in entries:
        for kind, field in kinds:
            rows += [[kind, key, entry["periodStart"], _number(seconds)]
                     for key, seconds in entry[field].items()]
        rows.append(["total", "total", entry["periodStart"], _number(entry["seconds"])])
    return _csv(["aggregation_type", "aggregation_key", "date", "seconds"], rows)


def allocations_csv(entries: Iterable[Mapping[str, Any]]) -> str:
    """`det resources allocations`: one line per allocation, its slot-hours within the
    window (Epochal pulls no images: imagepulling_time is 0.0)."""
    return _csv(
        ["allocation_id", "task_type", "username", "workspace_name", "experiment_id", "slots",
         "start_time", "end_time", "imagepulling_time", "slot_hours", "resource_pool"],
        ([e["allocationId"], e["taskType"], e["username"], e["workspaceName"] or "",
          str(e["experimentId"] or ""), str(e["slots"]), _go_time(e["startTime"]),
          _go_time(e["endTime"]), "0.0", _number(e["seconds"] * e["slots"] / 3600.0),
          e["resourcePool"]] for e in entries))
