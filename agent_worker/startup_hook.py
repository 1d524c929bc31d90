"""Determined's startup hook: `startup-hook.sh` at the top of the context directory (and the file
`$TCD_STARTUP_HOOK` names, where the environment sets it) is sourced before the entrypoint, in
the same shell and as the run's identity, so what it exports, installs or prepares reaches the
training code (Determined's `entrypoint.sh` does the same). Its output is the run's output.

A command of the hook that fails ends the run with its status (`set -e` while the hook runs, as
on Determined), and the run's failure names the hook and its last lines of output, which is
where a failed `pip install` says why. A run without a hook keeps its entrypoint as it is.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path

from agent_worker.runtime import ExitStatus, LogSink

HOOK_FILE = "startup-hook.sh"
TCD_HOOK_ENV = "TCD_STARTUP_HOOK"
OWN_LINES = "[epochal] "  # the wrapper's lines, not the run's output
FAILED = OWN_LINES + "startup hook "  # the line the wrapper prints when a hook fails
_FAILED_LINE = re.compile(re.escape(FAILED) + r"(?P<hook>.+) failed with exit status \d+$")
_LAST_LINES = 5


def with_startup_hooks(entrypoint: str, run_dir: Path, env: Mapping[str, str]) -> str:
    """The shell command line that sources the run's hooks, then runs `entrypoint`; the
    entrypoint itself when there is no hook."""
    hooks = []  # (the path as the shell reads it, the name the logs give it)
    if env.get(TCD_HOOK_ENV):  # tested where it runs: the path is the run's
        hooks.append((f'"${TCD_HOOK_ENV}"', f"${TCD_HOOK_ENV}"))
    if (run_dir / HOOK_FILE).is_file():
        hooks.append((f"./{HOOK_FILE}", HOOK_FILE))
    if not hooks:
        return entrypoint
    # The trap says which hook failed when `set -e` ends the shell inside one.
    lines = [
        "trap '__epochal_status=$?; if [ -n \"${__epochal_hook:-}\" ] && "
        "[ \"$__epochal_status\" -ne 0 ]; then echo \"" + FAILED
        + "$__epochal_hook failed with exit status $__epochal_status\" >&2; fi' EXIT",
    ]
    for path, name in hooks:
        lines += [
            f"if [ -f {path} ]; then",
            f'  __epochal_hook="{name}"',
            f'  echo "{OWN_LINES}sourcing {name}" >&2',
            "  set -e",
            f"  . {path}",
            "  set +e",
            "fi",
        ]
    lines += ["__epochal_hook=", "trap - EXIT", entrypoint]
    return "\n".join(lines)


class HookWatch:
    """In front of the run's log sink: passes every line on, and keeps the last lines of the
    run's own output and the wrapper's line saying a hook failed, so that the run's failure
    can say so. The line may come before the hook's last lines (stderr and stdout are read
    apart), so the lines are the last ones of the whole run: a failed hook ends it."""

    def __init__(self, sink: LogSink) -> None:
        self._sink = sink
        self._last: collections.deque[str] = collections.deque(maxlen=_LAST_LINES)
        self._failed: str | None = None  # the hook

    def add(self, stdtype: str, line: str) -> None:
        self._sink.add(stdtype, line)
        text = line.strip()
        failed = _FAILED_LINE.match(text)
        if failed:
            self._failed = failed.group("hook")
        elif text and not text.startswith(OWN_LINES):
            self._last.append(text)

    def explain(self, status: ExitStatus) -> ExitStatus:
        """`status`, its message naming the failed hook and its last lines if one failed."""
        if self._failed is None or status.exit_code == 0:
            return status
        said = f"; its last lines: {' | '.join(self._last)}" if self._last else ""
        return dataclasses.replace(
            status, message=f"the startup hook {self._failed} failed ({status.message}){said}")
