"""Per-run cgroups (cgroup v2): every process a run starts dies with the run.

A process group is not enough: a trial's `setsid` grandchild leaves it, and after `kill -9` of
the agent nothing remembers the run's processes at all. So each run of the process runtime
joins a cgroup of its own, `<cgroup2 mount>/epochal/<agent id>-<work dir hash>/<run>`, before
its entrypoint starts: whatever it forks stays there. When the run ends (or is stopped),
`cgroup.kill` ends every process left in it. An agent that starts again kills what its previous
life's runs left (`sweep`) before it takes work.

Where no writable cgroup v2 hierarchy with `cgroup.kill` (Linux 5.14) exists, or the agent is
not root, runs fall back to their process group, and the agent says so at start.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from pathlib import Path

logger = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def cgroup2_mount(mountinfo: str = "/proc/self/mountinfo") -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup` or `.../unified`), if it is."""
    try:
        lines = Path(mountinfo).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if " - cgroup2 " in line and len(fields) > 4:
            return Path(fields[4])
    return None


class RunCgroups:
    """The cgroups of one agent's runs, or `None` as `root` where they cannot be made."""

    def __init__(self, root: Path | None) -> None:
        self.root = root

    @classmethod
    def for_agent(cls, agent_id: str, work_dir: Path) -> RunCgroups:
        """The cgroups of the agent `agent_id` working in `work_dir`: an agent started again
        with both finds its previous runs'; another agent on this host never does."""
        mount = cgroup2_mount()
        if mount is None or os.geteuid() != 0:
            logger.warning("no cgroup v2 hierarchy to manage (or not root): a run's processes "
                           "that leave its process group may outlive it")
            return cls(None)
        place = hashlib.sha256(str(work_dir.resolve()).encode()).hexdigest()[:12]
        root = mount / "epochal" / f"{_UNSAFE.sub('_', agent_id)}-{place}"
        try:
            root.mkdir(parents=True, exist_ok=True)
            probe = root / "probe"
            probe.mkdir(exist_ok=True)
            usable = (probe / "cgroup.kill").exists()
            probe.rmdir()
        except OSError as err:
            logger.warning("cannot make cgroups under %s (%s): a run's processes that leave its "
                           "process group may outlive it", mount, err)
            return cls(None)
        if not usable:
            logger.warning("cgroup v2 at %s has no cgroup.kill (Linux before 5.14): a run's "
                           "processes that leave its process group may outlive it", mount)
            return cls(None)
        return cls(root)

    def create(self, name: str) -> Path | None:
        """A fresh cgroup for one run (None where there are none)."""
        if self.root is None:
            return None
        path = self.root / _UNSAFE.sub("_", name)
        if path.exists():
            self.kill(path)
        path.mkdir()
        return path

    def kill(self, path: Path | None, timeout: float = 5.0) -> int:
        """End every process in the cgroup, wait for them to be gone, remove it; how many
        there were."""
        if path is None or not path.exists():
            return 0
        count = len(self.pids(path))
        try:
            (path / "cgroup.kill").write_text("1")
        except OSError as err:
            logger.warning("cannot kill the processes of %s: %s", path, err)
        deadline = time.monotonic() + timeout
        while self.pids(path) and time.monotonic() < deadline:
            time.sleep(0.02)
        try:
            path.rmdir()
        except OSError as err:
            logger.warning("cannot remove %s: %s", path, err)
        return count

    def sweep(self) -> int:
        """Kill what runs of a previous life of this agent left; how many processes."""
        if self.root is None:
            return 0
        killed = sum(self.kill(child) for child in sorted(self.root.iterdir()) if child.is_dir())
        if killed:
            logger.warning("killed %d processes that runs of this agent's previous start left",
                           killed)
        return killed

    @staticmethod
    def pids(path: Path) -> list[int]:
        try:
            return [int(p) for p in (path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []


# Joins the cgroup named by $1 (its cgroup.procs), then becomes the rest of the command line.
JOIN_THEN_RUN = 'echo $$ > "$1/cgroup.procs" || exit 125; shift; exec "$@"'
