"""The wall time of each stage of `make test`, printed at its end so a slow stage shows at once.

    python -m deploy.stages run NAME -- COMMAND...   # run COMMAND, note NAME's seconds
    python -m deploy.stages report                   # print the stages noted, then forget them

`run` exits with COMMAND's status, and reports when it fails (make stops there); a stage run in
several commands is reported once, summed. Stages may run side by side (`make test` runs its
setup in parallel), so the total is the wall time from the first start to the last end, not the
stages' sum. The notes live in one file (`EPOCHAL_STAGES_FILE`, default `.stages` in the working
directory), so the Makefile's recipes, each its own shell, add to one list (each note one
appended line, written whole). It imports only the standard library: it times the install too,
before any venv exists.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path


def _notes() -> Path:
    return Path(os.environ.get("EPOCHAL_STAGES_FILE", ".stages"))


def run(name: str, command: list[str]) -> int:
    started = time.time()  # the wall clock: the notes of several processes are compared
    status = subprocess.call(command)
    ended = time.time()
    with _notes().open("a", encoding="utf-8") as notes:
        notes.write(f"{name}\t{ended - started:.1f}\t{status}\t{started:.3f}\t{ended:.3f}\n")
    if status != 0:  # make stops here: the stages so far are all there will be
        report()
    return status


def report() -> None:
    notes = _notes()
    if not notes.is_file():
        return
    stages: dict[str, tuple[float, str]] = {}
    starts: list[float] = []
    ends: list[float] = []
    for line in notes.read_text(encoding="utf-8").splitlines():
        name, noted, status, started, ended = line.split("\t")
        before, worst = stages.get(name, (0.0, "0"))
        stages[name] = (before + float(noted), status if status != "0" else worst)
        starts.append(float(started))
        ends.append(float(ended))
    notes.unlink()
    if not stages:
        return
    width = max(len(name) for name in stages)
    print("\nmake test, wall time per stage:")
    for name, (seconds, status) in stages.items():
        failed = "" if status == "0" else f"  (exit {status})"
        print(f"  {name:<{width}}  {_clock(seconds)}{failed}")
    print(f"  {'total':<{width}}  {_clock(max(ends) - min(starts))}")


def _clock(seconds: float) -> str:
    minutes, rest = divmod(seconds, 60)
    return f"{seconds:7.1f} s ({int(minutes)}:{rest:04.1f})"


def main(argv: list[str]) -> int:
    if argv[:1] == ["report"] and len(argv) == 1:
        report()
        return 0
    if len(argv) >= 4 and argv[0] == "run" and argv[2] == "--":
        return run(argv[1], argv[3:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
