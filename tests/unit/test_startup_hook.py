"""Determined's startup hook (agent_worker/startup_hook.py), run by /bin/sh as the runtimes run
an entrypoint: what the hook exports and prepares reaches the entrypoint; a hook that fails ends
the run with its status, and the run's failure names it and its last lines."""

from __future__ import annotations

import subprocess
from pathlib import Path

from agent_worker.runtime import ExitStatus
from agent_worker.startup_hook import HookWatch, with_startup_hooks


class Lines:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def add(self, stdtype: str, line: str) -> None:
        self.lines.append((stdtype, line))


def run(command: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, Lines,
                                                                               HookWatch]:
    proc = subprocess.run(["/bin/sh", "-c", command], cwd=cwd, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", **(env or {})}, timeout=30)
    sink = Lines()
    watch = HookWatch(sink)
    for stdtype, text in (("stdout", proc.stdout), ("stderr", proc.stderr)):
        for line in text.splitlines():
            watch.add(stdtype, line)
    return proc.returncode, sink, watch


def test_without_a_hook_the_entrypoint_is_unchanged(tmp_path: Path) -> None:
    assert with_startup_hooks("python3 train.py", tmp_path, {}) == "python3 train.py"


def test_what_the_hook_exports_and_prepares_reaches_the_entrypoint(tmp_path: Path) -> None:
    (tmp_path / "startup-hook.sh").write_text(
        'export DATA_DIR="$PWD/prepared"\nmkdir -p prepared\necho 42 > prepared/answer.txt\n'
        "echo hook ran\n")
    command = with_startup_hooks('echo "answer $(cat "$DATA_DIR/answer.txt")"; exit 0',
                                 tmp_path, {})
    code, sink, watch = run(command, tmp_path)
    assert code == 0
    assert ("stdout", "hook ran") in sink.lines and ("stdout", "answer 42") in sink.lines
    assert ("stderr", "[epochal] sourcing startup-hook.sh") in sink.lines
    assert watch.explain(ExitStatus(0, "exited with code 0")).message == "exited with code 0"


def test_the_environments_hook_runs_first(tmp_path: Path) -> None:
    tcd = tmp_path / "tcd-hook.sh"
    tcd.write_text("export ORDER=tcd\n")
    (tmp_path / "startup-hook.sh").write_text('export ORDER="$ORDER,context"\n')
    env = {"TCD_STARTUP_HOOK": str(tcd)}
    code, sink, _ = run(with_startup_hooks('echo "$ORDER"', tmp_path, env), tmp_path, env)
    assert code == 0 and ("stdout", "tcd,context") in sink.lines
    # Named but absent where the run is: nothing to source.
    env = {"TCD_STARTUP_HOOK": str(tmp_path / "absent.sh")}
    code, sink, _ = run(with_startup_hooks('echo "$ORDER"', tmp_path, env), tmp_path, env)
    assert code == 0 and ("stdout", ",context") in sink.lines


def test_a_failing_hook_fails_the_run_naming_it_and_its_last_lines(tmp_path: Path) -> None:
    (tmp_path / "startup-hook.sh").write_text(
        "echo collecting torch==9.9\necho 'ERROR: No matching distribution found' >&2\n"
        "false\necho never\n")
    code, sink, watch = run(with_startup_hooks("echo trained", tmp_path, {}), tmp_path)
    assert code == 1
    assert ("stdout", "trained") not in sink.lines and ("stdout", "never") not in sink.lines
    assert ("stderr", "[epochal] startup hook startup-hook.sh failed with exit status 1"
            ) in sink.lines
    message = watch.explain(ExitStatus(1, "exited with code 1")).message
    assert message.startswith("the startup hook startup-hook.sh failed (exited with code 1)")
    assert "ERROR: No matching distribution found" in message
    # `exit` in the hook ends the run with its status too.
    (tmp_path / "startup-hook.sh").write_text("exit 3\n")
    code, _, watch = run(with_startup_hooks("echo trained", tmp_path, {}), tmp_path)
    assert code == 3
    assert "startup-hook.sh failed" in watch.explain(ExitStatus(3, "exited with code 3")).message


def test_the_entrypoint_failing_after_the_hook_is_not_blamed_on_it(tmp_path: Path) -> None:
    (tmp_path / "startup-hook.sh").write_text("echo ok\n")
    code, _, watch = run(with_startup_hooks("exit 5", tmp_path, {}), tmp_path)
    assert code == 5
    assert watch.explain(ExitStatus(5, "exited with code 5")).message == "exited with code 5"
