"""How the CLI shows things to people: tables, states, times, sizes, metric values.

`--json` output bypasses all of this (`print_json`), so scripts get the server's JSON.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from common.states import TERMINAL_STATES, CheckpointState

# Width for output that goes to a file or a pipe: wide enough that rows are not wrapped for grep.
PIPE_WIDTH = 400


def console() -> Console:
    # Made per use so that it writes to whatever sys.stdout is now (tests swap it).
    width = None
    if "COLUMNS" not in os.environ and not _is_tty(sys.stdout):
        width = PIPE_WIDTH
    return Console(highlight=False, soft_wrap=False, width=width)


def _is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()


def done(as_json: bool, answer: Any, text: str) -> None:
    """What an action command prints when it has done its work: `answer` as JSON (the server's,
    or a small object saying what was done) with --json, else the line `text`."""
    if as_json:
        print_json(answer)
    else:
        say(text)


def say(text: str = "") -> None:
    """A plain line on stdout (no markup: names and logs may hold brackets)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def warn(text: str) -> None:
    sentence(f"warning: {text}")


def state(value: Any) -> str:
    """A state without Determined's `STATE_` prefix."""
    if not value:
        return "-"
    text = str(value)
    return text.removeprefix("STATE_")


def is_terminal(value: Any) -> bool:
    return state(value) in TERMINAL_STATES


def when(value: Any, compact: bool = False, now: datetime | None = None) -> str:
    """An RFC 3339 time in local time: `YYYY-MM-DD HH:MM:SS`, or for table cells (`compact`)
    `HH:MM` today and `YYYY-MM-DD HH:MM` any other day."""
    if not value:
        return "-"
    text = str(value)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return text
    if moment.tzinfo is not None:
        moment = moment.astimezone()
    if not compact:
        return moment.strftime("%Y-%m-%d %H:%M:%S")
    now = now or datetime.now(moment.tzinfo)
    if moment.date() == now.date():
        return moment.strftime("%H:%M")
    return moment.strftime("%Y-%m-%d %H:%M")


def duration(start: Any, end: Any) -> str:
    if not start or not end:
        return "-"
    try:
        a = datetime.fromisoformat(str(start).replace("Z", "+00:00"))
        b = datetime.fromisoformat(str(end).replace("Z", "+00:00"))
        seconds = int((b - a).total_seconds())
    except (ValueError, TypeError):
        return "-"
    hours, rest = divmod(max(seconds, 0), 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def size(n: Any) -> str:
    if not isinstance(n, int | float):
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover


def number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def percent(value: Any) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "-"
    return f"{100 * value:.0f}%"


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"a": {"b": 1}}` -> `{"a.b": 1}`."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def hparams(values: Any) -> str:
    if not isinstance(values, Mapping) or not values:
        return "-"
    return ", ".join(f"{k}={hp_value(v)}" for k, v in sorted(flatten(values).items()))


def hp_value(value: Any) -> str:
    if isinstance(value, str | int | float | bool) or value is None:
        return number(value) if not isinstance(value, str) else value
    return json.dumps(value)


def metrics_of(report: Any) -> dict[str, Any]:
    """The metric values of a MetricReport (`metrics` may wrap them in `avgMetrics`)."""
    if not isinstance(report, Mapping):
        return {}
    values = report.get("metrics")
    if not isinstance(values, Mapping):
        return {}
    inner = values.get("avgMetrics")
    if isinstance(inner, Mapping):
        return dict(inner)
    return dict(values)


def metric_value(report: Any, name: str | None) -> Any:
    if not name:
        return None
    return metrics_of(report).get(name)


def trial_metric(trial: Mapping[str, Any], name: str | None, which: str) -> Any:
    """The searcher metric of a trial's `latest` or `best` validation."""
    if which == "latest":
        value = metric_value(trial.get("latestValidation"), name)
        return value
    value = metric_value(trial.get("bestValidation"), name)
    if value is None:
        value = trial.get("searcherMetricValue")
    if value is None:
        value = metric_value(trial.get("latestValidation"), name)
    return value


# C0 and C1 control characters and DEL: printed as they are, a name or label could move the
# cursor, recolour or clear another user's terminal.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` with its control characters shown as escapes (`\x1b`), not acted on."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def cell(text: str) -> Text:
    """One line of a table cell, shown literally (no markup, control characters escaped), cut
    short with an ellipsis rather than wrapped when its column is narrower."""
    return Text(printable(text), no_wrap=True, overflow="ellipsis")


class _PlainTable(Table):
    """A table whose text cells are shown literally: no Rich markup (names may hold brackets),
    no control characters, one line per row."""

    def add_row(self, *renderables: Any, **kwargs: Any) -> None:
        cells = [cell(c) if isinstance(c, str) else c for c in renderables]
        super().add_row(*cells, **kwargs)


def table(*columns: str, shrink: Iterable[str] = ()) -> Table:
    """A table that fits the terminal without wrapping a row: when it is too wide, the columns
    named in `shrink` (names, descriptions, hyperparameters, times) are cut short first, the
    widest first, each cell ending in "…" (Rich collapses the columns it may wrap; the cells
    themselves never wrap). Past that every column gives way alike."""
    shrinking = set(shrink)
    t = _PlainTable(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False,
                    collapse_padding=True)
    for name in columns:
        t.add_column(cell(name), no_wrap=name not in shrinking, overflow="ellipsis")
    return t


def fields(rows: Iterable[tuple[str, Any]]) -> Table:
    """A two-column `name  value` list; a value that is a list of strings is shown one per line
    (hyperparameters), and a long value wraps within its column."""
    t = _PlainTable(box=None, show_header=False, pad_edge=False)
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")
    for name, value in rows:
        if isinstance(value, list | tuple):
            shown: Any = Text("\n".join(printable(str(v)) for v in value) or "-")
        elif isinstance(value, str):
            shown = Text(printable(value))
        else:
            shown = number(value)
        t.add_row(name, shown)
    return t


def show(renderable: Any) -> None:
    """Print a table at the terminal's width (PIPE_WIDTH into a file or pipe), without the
    spaces Rich pads its last column with."""
    out = console()
    with out.capture() as captured:
        out.print(renderable, crop=False)
    lines = captured.get().split("\n")
    sys.stdout.write("\n".join(line.rstrip() for line in lines))
    sys.stdout.flush()


MAX_HPARAM_COLUMNS = 6


def varying_hparams(trials: Sequence[Mapping[str, Any]]) -> tuple[list[str], dict[str, Any]]:
    """(names whose values differ between trials, {name: value} of those every trial shares)."""
    flats = [flatten(t.get("hparams") or {}) for t in trials]
    names = sorted({name for flat in flats for name in flat})
    varying = [n for n in names if len({hp_value(f.get(n)) for f in flats}) > 1]
    shared = {n: flats[0].get(n) for n in names if n not in varying} if flats else {}
    return varying, shared


def trials_table(
    trials: Sequence[Mapping[str, Any]], metric: str | None, best_id: Any = None,
    by_id: bool = True, which: str = "latest",
) -> RenderableType:
    """One row per trial (by id, or in the order given); the hyperparameters that differ
    between trials get a column each, the ones they share are listed once under the table (a
    paragraph that wraps at the terminal's width, not a row). The metric column shows each
    trial's `latest` validation's value, or its `best` (the value a ranking by it used)."""
    metric_header = metric or "metric"
    if which == "best":
        metric_header = f"best {metric_header}"
    varying, shared = varying_hparams(trials)
    split = len(trials) > 1 and len(varying) <= MAX_HPARAM_COLUMNS
    hp_columns = varying if split else ["Hyperparameters"]
    searched = any(t.get("searcherStatus") for t in trials)  # ASHA: rungs and decisions
    search_columns = ["Searcher"] if searched else []
    t = table("Trial", "State", "Steps", metric_header, "Restarts", *search_columns,
              *hp_columns, shrink=["Hyperparameters", "Searcher", *hp_columns])
    for trial in sorted(trials, key=lambda x: x.get("id") or 0) if by_id else trials:
        marker = " *" if best_id is not None and trial.get("id") == best_id else ""
        flat = flatten(trial.get("hparams") or {})
        hp_cells = (
            [hp_value(flat.get(n)) for n in varying] if split else [hparams(trial.get("hparams"))]
        )
        t.add_row(
            f"{trial.get('id')}{marker}",
            state(trial.get("state")),
            number(trial.get("totalBatchesProcessed")),
            number(trial_metric(trial, metric, which)),
            number(trial.get("restarts")),
            *([trial.get("searcherStatus") or ("" if trial.get("endTime") else "running")]
              if searched else []),
            *hp_cells,
        )
    if split and shared:
        return Group(t, Text(printable("same in every trial: " + hparams(shared))))
    return t


def checkpoint_steps(checkpoint: Mapping[str, Any]) -> Any:
    metadata = checkpoint.get("metadata")
    if isinstance(metadata, Mapping):
        return metadata.get("steps_completed")
    return None


def checkpoint_size(checkpoint: Mapping[str, Any]) -> int | None:
    resources = checkpoint.get("resources")
    if not isinstance(resources, Mapping):
        return None
    return sum(v for v in resources.values() if isinstance(v, int))


def checkpoint_training(checkpoint: Mapping[str, Any]) -> Mapping[str, Any]:
    training = checkpoint.get("training")
    return training if isinstance(training, Mapping) else {}


def without_deleted(checkpoints: Sequence[Mapping[str, Any]]
                    ) -> tuple[list[Mapping[str, Any]], int]:
    """(the checkpoints that are not DELETED, how many were)."""
    kept = [c for c in checkpoints if state(c.get("state")) != CheckpointState.DELETED]
    return kept, len(checkpoints) - len(kept)


def checkpoints_table(checkpoints: Sequence[Mapping[str, Any]], metric: str | None,
                      with_trial: bool = True) -> Table:
    """By trial and steps; the uuid, steps and state stay whole, the time and the metric's
    column give way first in a narrow terminal."""
    metric_header = metric or "searcher metric"
    columns = ["UUID", *(["Trial"] if with_trial else []), "Steps", "State", "Size", "Reported",
               metric_header]
    t = table(*columns, shrink=["Reported", metric_header])
    ordered = sorted(
        checkpoints,
        key=lambda c: (checkpoint_training(c).get("trialId") or 0, checkpoint_steps(c) or 0),
    )
    for c in ordered:
        training = checkpoint_training(c)
        t.add_row(
            str(c.get("uuid")),
            *([number(training.get("trialId"))] if with_trial else []),
            number(checkpoint_steps(c)),
            state(c.get("state")),
            size(checkpoint_size(c)),
            when(c.get("reportTime"), compact=True),
            number(training.get("searcherMetric")),
        )
    return t


def system_metrics_table(samples: Sequence[Mapping[str, Any]]) -> Table:
    """The agent's samples of a trial (metric group `system`), oldest first: time, CPU, memory,
    disk and network rates, and each GPU's utilization and memory."""
    gpus = sorted({name.split("_")[0] for s in samples for name in s["metrics"]
                   if name.startswith("gpu") and name.endswith("_util_percent")})
    t = table("Time", "CPU %", "Memory", "Disk read/s", "Disk write/s", "Net in/s",
              "Net out/s", *(f"{g} %" for g in gpus), *(f"{g} memory" for g in gpus))
    for sample in samples:
        values = sample["metrics"]
        t.add_row(
            when(sample.get("reportTime")), number(values.get("cpu_util_percent")),
            size(values.get("memory_rss_bytes")), size(values.get("disk_read_bytes_per_s")),
            size(values.get("disk_write_bytes_per_s")),
            size(values.get("host_net_recv_bytes_per_s")),
            size(values.get("host_net_sent_bytes_per_s")),
            *(number(values.get(f"{g}_util_percent")) for g in gpus),
            *(size(values.get(f"{g}_memory_used_bytes")) for g in gpus))
    return t


def sentence(text: str, details: Sequence[str] = ()) -> None:
    """An error or notice on stderr, and its indented detail lines: wrapped at words to the
    terminal's width (a terminal breaks long lines mid-word); one line each into a pipe or file,
    so scripts can grep them."""
    lines = [*text.split("\n"), *(f"  {detail}" for detail in details)]
    if _is_tty(sys.stderr) or "COLUMNS" in os.environ:
        import shutil
        import textwrap

        width = max(40, shutil.get_terminal_size().columns - 1)
        lines = [textwrap.fill(line, width, subsequent_indent=" " * (len(line) - len(
            line.lstrip()) + 2), break_long_words=False, break_on_hyphens=False)
                 for line in lines]
    sys.stderr.write("\n".join(lines) + "\n")
    sys.stderr.flush()
