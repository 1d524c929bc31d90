"""`python -m cli.tunnel MASTER TASK_ID`: stdin and stdout piped to a task's TCP service (a
shell's sshd) through the master's proxy, for `ssh -o ProxyCommand=...`.

It speaks as Determined's `python -m determined.cli.tunnel` does: a WebSocket to
`/proxy/<taskId>/` whose binary messages carry the bytes both ways. It also sends the login
`epochal user login` keeps for MASTER (or EPOCHAL_TOKEN), which the master checks when given.
Errors go to stderr (stdout is ssh's stream) as `error: ...`, exit 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from urllib.parse import quote

from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI
from websockets.sync.client import ClientConnection, connect

from cli import credentials
from cli.client import resolve_master

CHUNK = 64 * 1024
CONNECT_TIMEOUT = 10.0


def tunnel_url(master: str, task_id: str) -> str:
    scheme, _, rest = master.partition("://")
    ws_scheme = "wss" if scheme == "https" else "ws"
    return f"{ws_scheme}://{rest}/proxy/{quote(task_id, safe='')}/"


def _refusal(error: InvalidStatus) -> str:
    """The master's own words for a refused tunnel (its error JSON), else the status."""
    response = error.response
    try:
        message = json.loads(response.body or b"").get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message) if message else f"{response.status_code} {response.reason_phrase}"


def _send_stdin(ws: ClientConnection) -> None:
    """stdin to the task until it ends, then close the tunnel (as Determined's tunnel does)."""
    stdin = sys.stdin.fileno()
    try:
        while chunk := os.read(stdin, CHUNK):
            ws.send(chunk)
        ws.close()
    except (ConnectionClosed, OSError):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cli.tunnel",
        description="Pipe stdin/stdout to a task's TCP service through the master "
                    "(ssh -o ProxyCommand='python -m cli.tunnel MASTER %%h').")
    parser.add_argument("master", help="the master's URL, e.g. http://127.0.0.1:8080")
    parser.add_argument("task_id", help="the task (a shell's id)")
    args = parser.parse_args(argv)
    master = resolve_master(args.master)
    token = credentials.token_for(master)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        ws = connect(tunnel_url(master, args.task_id), additional_headers=headers,
                     open_timeout=CONNECT_TIMEOUT, compression=None)
    except InvalidStatus as exc:
        print(f"error: the master refused the tunnel to task {args.task_id}: {_refusal(exc)}",
              file=sys.stderr)
        return 1
    except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
        print(f"error: cannot reach the master at {master}: {exc or type(exc).__name__}",
              file=sys.stderr)
        return 1
    with ws:
        threading.Thread(target=_send_stdin, args=(ws,), daemon=True).start()
        stdout = sys.stdout.buffer
        try:
            for message in ws:
                stdout.write(message if isinstance(message, bytes) else message.encode())
                stdout.flush()
        except (ConnectionClosed, OSError):  # the master hung up, or ssh did
            pass
    code = ws.close_code
    if code not in (None, 1000, 1005):
        print(f"error: the tunnel to task {args.task_id} closed ({code}): "
              f"{ws.close_reason or 'no reason given'}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
