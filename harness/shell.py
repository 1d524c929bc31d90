"""The program a SHELL task runs: an SSH server for its owner's key alone (AsyncSSH).

`det shell start` and `epochal shell open` reach it through the master's proxy (ssh's
ProxyCommand carries the connection in a WebSocket to `/proxy/<taskId>/`). It runs as the task's
user with nothing of the host's accounts: the host key is made at start, the one key that may
log in comes from the task's launch, any login name is taken (Determined's client logs in as
its agent user, "root" by default), and every session runs as the task's user in the task's
directory with the task's variables (DET_MASTER, the owner's token, ...), as Determined's shells
do. OpenSSH's sshd could not serve here: it refuses accounts such as `nobody` (locked, no login
shell), which sandboxed tasks run as.

    python -m harness.shell --host H --port P
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import os
import pty
import shutil
import struct
import sys
import termios
import warnings
from typing import Any

PUBLIC_KEY_ENV = "EPOCHAL_SHELL_PUBLIC_KEY"

try:
    with warnings.catch_warnings():  # older releases import ciphers cryptography deprecates
        warnings.simplefilter("ignore")
        import asyncssh
except ImportError:  # the task environment lacks it: say so in one line
    asyncssh = None  # type: ignore[assignment]


def login_shell() -> str:
    for candidate in (os.environ.get("SHELL"), "/bin/bash", "/bin/sh"):
        if candidate and shutil.which(candidate):
            return candidate
    return "/bin/sh"


def _set_window(fd: int, size: tuple[int, int, int, int]) -> None:
    columns, rows = size[0] or 80, size[1] or 24
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


def _take_terminal() -> None:
    """In the session's child, after setsid: its terminal becomes the controlling one."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


async def run_session(process: Any) -> None:
    """One session: the client's command (or a login shell) as the task's user, on a pseudo
    terminal when the client asked for one (ssh -t), else on pipes."""
    shell = login_shell()
    argv = [shell, "-c", process.command] if process.command else [shell, "-l"]
    env = {**os.environ, **{str(k): str(v) for k, v in (process.env or {}).items()}}
    term = process.term_type
    try:
        if term:
            env["TERM"] = term
            leader, follower = pty.openpty()
            _set_window(follower, process.term_size)
            child = await asyncio.create_subprocess_exec(
                *argv, stdin=follower, stdout=follower, stderr=follower, env=env,
                cwd=os.getcwd(), start_new_session=True, preexec_fn=_take_terminal)
            os.close(follower)
            # One file per direction: asyncio watches each as a pipe of its own.
            output = os.fdopen(leader, "rb", buffering=0)
            keys = os.fdopen(os.dup(leader), "wb", buffering=0)
            await process.redirect(stdin=keys, stdout=output)
        else:
            child = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=env, cwd=os.getcwd(),
                start_new_session=True)
            await process.redirect(stdin=child.stdin, stdout=child.stdout,
                                   stderr=child.stderr)
        code = await child.wait()
        await process.stdout.drain()
    except OSError as err:
        process.stderr.write(f"cannot start {shell}: {err}\n".encode())
        code = 127
    process.exit(code if code >= 0 else 128 - code)


def server_class() -> type:
    class OwnerOnly(asyncssh.SSHServer):
        """Public keys only (the authorized one); any login name; forwarding allowed (the
        task's own network, as `ssh -L` and IDEs' remote sessions use it)."""

        def begin_auth(self, username: str) -> bool:
            return True

        def password_auth_supported(self) -> bool:
            return False

        def connection_requested(self, dest_host: str, dest_port: int, orig_host: str,
                                 orig_port: int) -> bool:
            return True

        def server_requested(self, listen_host: str, listen_port: int) -> bool:
            return True

    return OwnerOnly


async def serve(host: str, port: int, public_key: str) -> None:
    server = await asyncssh.create_server(
        server_class(), host, port,
        server_host_keys=[asyncssh.generate_private_key("ssh-ed25519")],
        authorized_client_keys=asyncssh.import_authorized_keys(public_key.strip() + "\n"),
        process_factory=run_session, encoding=None, line_editor=False,
        sftp_factory=True, allow_scp=True, agent_forwarding=False, x11_forwarding=False)
    print(f"SSH server listening on {host}:{port}", flush=True)
    await server.wait_closed()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.shell", description=__doc__)
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    if asyncssh is None:
        print("harness.shell: the task environment has no asyncssh (pip install asyncssh)",
              file=sys.stderr)
        return 1
    public_key = os.environ.get(PUBLIC_KEY_ENV, "")
    if not public_key.strip():
        print(f"harness.shell: {PUBLIC_KEY_ENV} is empty: no key may log in", file=sys.stderr)
        return 1
    try:
        asyncio.run(serve(args.host, args.port, public_key))
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
