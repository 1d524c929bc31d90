"""A command-line client that the tests run hundreds of times, imported once and forked per call.

The suite runs Determined's real `det` (and Epochal's `epochal`) as subprocesses, as users do;
each call spent most of its CPU importing the client (0.25 s of `det`'s 0.3-0.4 s), on a
machine the suite keeps busy. A zygote imports the client's modules once; each call is a fork of
it that takes the caller's argv, environment, working directory and standard streams (passed
as file descriptors over a Unix socket) and runs the client's own `main`, so the code that runs
is the client's, unchanged. The caller is a small launcher script in the command's place: it
exits with the command's status, forwards SIGINT and SIGTERM to it, and a killed launcher (a
test's timeout) takes the command with it.

This file is run by the client's own interpreter (Determined's venv has no Epochal), so it uses
the standard library only.

    python -P cli_zygote.py serve SOCKET MODULE:FUNCTION [--fresh=PACKAGE,...] [PRELOAD ...]

FUNCTION is called without arguments (it reads sys.argv), or as `FUNCTION(argv)` with the
command's arguments. The FRESH packages are imported anew in every call: a client may read its
environment and the clock at import (`det` takes its `--master` default from DET_MASTER and
`cluster-message set`'s start time from the clock when its modules load), and a call must see
its own. Their dependencies, most of the import time, stay imported.
"""

from __future__ import annotations

import array
import atexit
import contextlib
import importlib
import json
import os
import select
import signal
import socket
import stat
import subprocess
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

_HEADER_BYTES = 1 << 20  # argv and environment, as JSON
_FDS = 3  # stdin, stdout, stderr


def _receive(conn: socket.socket) -> tuple[dict[str, object], list[int]]:
    fds = array.array("i")
    message, ancillary, _, _ = conn.recvmsg(_HEADER_BYTES, socket.CMSG_SPACE(_FDS * fds.itemsize))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    # The header may come in more than one read; the descriptors come with its first bytes.
    while not message.endswith(b"\n"):
        more = conn.recv(_HEADER_BYTES)
        if not more:
            raise ConnectionError("the launcher hung up before its request was complete")
        message += more
    return json.loads(message), list(fds)


def _run_command(entry: str, fresh: list[str], request: dict[str, object],
                 fds: list[int]) -> None:
    """In the command's process: become the caller's process and run the client's main."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])  # type: ignore[arg-type]
    os.chdir(str(request["cwd"]))
    sys.argv = list(request["argv"])  # type: ignore[arg-type]
    inside = tuple(f"{package}." for package in fresh)
    for name in [name for name in sys.modules if name in fresh or name.startswith(inside)]:
        del sys.modules[name]
    module_name, function_name = entry.split(":")
    # `NAME(argv)`: a main whose default arguments were bound to sys.argv at its import (det's).
    with_argv = function_name.endswith("(argv)")
    function = getattr(importlib.import_module(module_name), function_name.removesuffix("(argv)"))
    status = 0
    try:
        result = function(sys.argv[1:]) if with_argv else function()
        status = result if isinstance(result, int) else 0
    except SystemExit as exit_:
        code = exit_.code
        if code is None:
            status = 0
        elif isinstance(code, int):
            status = code
        else:
            print(code, file=sys.stderr)
            status = 1
    except KeyboardInterrupt:
        status = 130
    except BaseException:  # what the interpreter prints for an uncaught exception
        traceback.print_exc()
        status = 1
    # What the interpreter does on its way out: exit handlers (a tracer's last spans) and the
    # streams' buffers; then out without the zygote's cleanup.
    try:
        atexit._run_exitfuncs()
    except BaseException:
        traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)


def _supervise(conn: socket.socket, entry: str, fresh: list[str]) -> None:
    """In a child of the zygote: start the command, report its pid and status to the launcher,
    and kill it if the launcher goes away first."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    request, fds = _receive(conn)
    pid = os.fork()
    if pid == 0:
        conn.close()
        os.setpgid(0, 0)  # the command and whatever it starts, killed together
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _run_command(entry, fresh, request, fds)
    # Here too, so that the group exists before the launcher learns the pid (the child may not
    # have run yet when a killed launcher asks for the group to go).
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)
    for fd in fds:
        os.close(fd)
    conn.sendall(f"{pid}\n".encode())
    watch = os.pidfd_open(pid)
    while True:
        ready, _, _ = select.select([watch, conn], [], [])
        if watch in ready:
            _, wait_status = os.waitpid(pid, 0)
            code = os.waitstatus_to_exitcode(wait_status)
            status = code if code >= 0 else 128 - code
            with contextlib.suppress(OSError):
                conn.sendall(f"{status}\n".encode())
            return
        try:
            gone = not conn.recv(1)
        except ConnectionResetError:  # killed before it read the pid: its socket resets
            gone = True
        if gone:  # the launcher is gone (killed by a test's timeout)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def serve(socket_path: str, entry: str, fresh: list[str], preload: list[str]) -> None:
    module_name = entry.split(":")[0]
    for name in (module_name, *preload):
        importlib.import_module(name)
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped by the kernel
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(socket_path)
    os.chmod(socket_path, stat.S_IRUSR | stat.S_IWUSR)
    server.listen(64)
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        if os.fork() == 0:
            server.close()
            try:
                _supervise(conn, entry, fresh)
            finally:
                os._exit(0)
        conn.close()


LAUNCHER = '''#!{python} -IS
"""{name}, run by the zygote at {socket} (tests/cli_zygote.py)."""
import array, json, os, signal, socket, sys
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
conn.connect({socket!r})
request = json.dumps({{"argv": [{name!r}, *sys.argv[1:]], "env": dict(os.environ),
                      "cwd": os.getcwd()}}).encode() + b"\\n"
conn.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
reader = conn.makefile("rb")
pid = int(reader.readline())
def forward(signum, frame):
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass
signal.signal(signal.SIGINT, forward)
signal.signal(signal.SIGTERM, forward)
line = reader.readline()
sys.exit(int(line) if line.strip() else 1)
'''


def write_launcher(path: Path, name: str, socket_path: str) -> Path:
    """A script at `path` that runs `name` in the zygote listening on `socket_path`."""
    path.write_text(LAUNCHER.format(python=sys.executable, name=name, socket=socket_path))
    path.chmod(0o755)
    return path


@contextlib.contextmanager
def zygote(python: Path, name: str, entry: str, directory: Path, *preload: str,
           fresh: tuple[str, ...] = ()) -> Iterator[Path]:
    """A zygote of `entry` run by `python` while the block runs; the launcher named `name` in
    `directory` (a short path: a Unix socket's is at most 107 bytes). The `fresh` packages are
    imported anew in each call (see the module's docstring)."""
    socket_path = str(directory / f"{name}.sock")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DET_", "EPOCHAL_"))}
    server = subprocess.Popen(
        [str(python), "-P", __file__, "serve", socket_path, entry,
         f"--fresh={','.join(fresh)}", *preload],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        text=True)
    try:
        assert server.stdout is not None
        if server.stdout.readline().strip() != "ready":
            _, errors = server.communicate(timeout=30)
            raise RuntimeError(f"the {name} zygote did not start:\n{errors[-4000:]}")
        yield write_launcher(directory / name, name, socket_path)
    finally:
        server.kill()
        server.communicate()


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[1] != "serve":
        sys.exit(__doc__)
    fresh_option = [arg for arg in sys.argv[4:] if arg.startswith("--fresh=")]
    fresh = [p for arg in fresh_option for p in arg.removeprefix("--fresh=").split(",") if p]
    serve(sys.argv[2], sys.argv[3], fresh,
          [arg for arg in sys.argv[4:] if not arg.startswith("--fresh=")])
