"""The zygote the suite runs `det` and `epochal` through (tests/cli_zygote.py) gives each call
what a fresh process would have: its arguments, environment, working directory and streams, its
exit status, and an end when its caller is killed."""

from __future__ import annotations

import array
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.cli_zygote import zygote
from tests.waiting import wait_for

ENTRY = '''
import json, os, sys, time

def main():
    if sys.argv[1:] == ["sleep"]:
        print(os.getpid(), flush=True)
        time.sleep(60)
    if sys.argv[1:] == ["raise"]:
        raise RuntimeError("boom")
    print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "var": os.environ.get("ZYGOTE_VAR"),
                      "stdin": sys.stdin.read()}))
    print("to stderr", file=sys.stderr)
    sys.exit(int(os.environ.get("ZYGOTE_EXIT", "0")))
'''


@pytest.fixture
def launcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "zygote_entry.py").write_text(ENTRY)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the zygote's, not the calls'
    with zygote(Path(sys.executable), "tool", "zygote_entry:main", tmp_path) as path:
        yield path


def test_a_call_gets_its_arguments_environment_directory_and_streams(
    launcher: Path, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run([str(launcher), "a", "b c"], input="from stdin", text=True,
                          capture_output=True, cwd=work, timeout=30,
                          env={"ZYGOTE_VAR": "x", "ZYGOTE_EXIT": "3"})
    assert done.returncode == 3, done
    assert done.stderr == "to stderr\n"
    assert done.stdout.strip() == (
        '{"argv": ["tool", "a", "b c"], "cwd": "' + str(work) + '", "var": "x", '
        '"stdin": "from stdin"}')


def test_an_uncaught_exception_prints_its_traceback_and_exits_1(launcher: Path) -> None:
    done = subprocess.run([str(launcher), "raise"], capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "RuntimeError: boom" in done.stderr


def test_a_killed_caller_takes_its_command_with_it(launcher: Path) -> None:
    caller = subprocess.Popen([str(launcher), "sleep"], stdout=subprocess.PIPE, text=True,
                              stdin=subprocess.DEVNULL)
    assert caller.stdout is not None
    command = psutil.Process(int(caller.stdout.readline()))
    caller.kill()
    caller.wait()
    deadline = time.monotonic() + 10
    while command.is_running() and command.status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the command outlived its killed caller"
        time.sleep(0.05)


def test_a_caller_gone_before_it_read_the_pid_takes_its_command_with_it(
    launcher: Path, tmp_path: Path
) -> None:
    """A launcher killed before it read the command's pid (which the command may print first,
    under load) leaves that line unread, and its socket resets: the command goes too."""
    caller = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    caller.connect(str(tmp_path / "tool.sock"))
    read_end, write_end = os.pipe()
    request = json.dumps({"argv": ["tool", "sleep"], "env": {}, "cwd": str(tmp_path)}).encode()
    caller.sendmsg([request + b"\n"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                        array.array("i", [0, write_end, 2]))])
    os.close(write_end)
    caller.settimeout(30)
    with os.fdopen(read_end) as printed:
        command = psutil.Process(int(printed.readline()))
        assert caller.recv(64, socket.MSG_PEEK), "no pid line in the caller's socket"
        caller.close()  # with the pid line unread
    wait_for(lambda: not command.is_running() or command.status() == psutil.STATUS_ZOMBIE,
             timeout=10, what="the command to end with its caller")


def test_a_fresh_package_is_imported_anew_in_each_call(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """What `det` needs: a client whose modules read the environment and the clock at import
    (its `--master` default, `cluster-message set`'s start time) sees each call's."""
    package = tmp_path / "stateful"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "defaults.py").write_text(
        "import os, time\nMASTER = os.environ.get('ZYGOTE_MASTER')\nLOADED = time.time()\n")
    (package / "main.py").write_text(
        "import time\nfrom stateful import defaults\n"
        "def main():\n    print(defaults.MASTER, round(time.time() - defaults.LOADED))\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    with zygote(Path(sys.executable), "tool", "stateful.main:main", tmp_path,
                fresh=("stateful",)) as tool:
        time.sleep(2)
        outputs = [subprocess.run([str(tool)], capture_output=True, text=True, timeout=30,
                                  stdin=subprocess.DEVNULL, env={"ZYGOTE_MASTER": master},
                                  check=True).stdout.split()
                   for master in ("http://one:8080", "http://two:8080")]
    assert outputs == [["http://one:8080", "0"], ["http://two:8080", "0"]]
