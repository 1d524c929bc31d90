"""Files of a run that only the trial's user may read: they hold its token and its code."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def write_private(path: Path, text: str) -> None:
    """Write `text` to a file created 0600 (never readable by others, not even for a moment)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)


def make_private(directory: Path, owner: tuple[int, int] | None) -> None:
    """The directory 0700 and nothing in it readable by others, all given to `owner` (uid, gid)
    when the trial runs as another user than the agent."""
    for root, dirs, files in os.walk(directory):
        for name in [*dirs, *files]:
            path = os.path.join(root, name)
            mode = os.lstat(path).st_mode
            if not stat.S_ISLNK(mode):
                os.chmod(path, stat.S_IMODE(mode) & 0o700)
            if owner is not None:
                os.lchown(path, *owner)
    directory.chmod(0o700)
    if owner is not None:
        os.chown(directory, *owner)
