"""``python -m harness.launch.wrap_rank -- COMMAND...``: run COMMAND, each line of its output
prefixed with ``[rank=N]`` (N from RANK), as Determined's logs show a distributed trial's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from typing import IO


def copy_lines(source: IO[bytes], sink: IO[bytes], prefix: bytes) -> None:
    for line in iter(source.readline, b""):
        sink.write(prefix + line)
        sink.flush()


def main(argv: list[str]) -> int:
    command = argv[1:] if argv[:1] == ["--"] else argv
    if not command:
        print("usage: python -m harness.launch.wrap_rank -- COMMAND...", file=sys.stderr)
        return 2
    prefix = f"[rank={os.environ.get('RANK', '?')}] ".encode()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def forward(signum: int, _frame: object) -> None:
        child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    assert child.stdout is not None and child.stderr is not None
    copiers = [threading.Thread(target=copy_lines, args=(pipe, sink, prefix), daemon=True)
               for pipe, sink in ((child.stdout, sys.stdout.buffer),
                                  (child.stderr, sys.stderr.buffer))]
    for copier in copiers:
        copier.start()
    code = child.wait()
    for copier in copiers:
        copier.join(timeout=5)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
