"""A Docker engine for the Docker runtime's tests (and for a fresh machine): find or start one.

    python -m deploy.dockerd [--build-image]

If no engine answers and this is CI (env CI=true) or we are root, it installs Debian's
`docker.io` and `debootstrap` when `dockerd` is missing (apt-get, never prompting) and starts
`dockerd` detached, its log in /var/log/epochal-dockerd.log. It first tries dockerd's defaults
(overlay2, cgroupfs, a bridge with iptables); if that engine does not answer, it retries with
`--iptables=false --bridge=none`, which is all the Docker runtime needs (trial containers use the
host's network). With `--build-image` it then builds the task image (cached by content hash).

Exit status 0 when an engine answers (and the image is built), 1 when that failed in CI or as
root, 0 with a note otherwise (the Docker tests then skip, saying why).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from deploy.debian_packages import apt_install, may_set_up

LOG_FILE = Path("/var/log/epochal-dockerd.log")
FALLBACK_FLAGS = ("--iptables=false", "--bridge=none")
# docker-compose validates deploy/compose/docker-compose.yml (tests/integration/test_compose.py).
APT_PACKAGES = {"docker.io": "dockerd", "debootstrap": "debootstrap",
                "docker-compose": "docker-compose"}


def answers(timeout: float = 3.0) -> bool:
    from agent_worker.docker_engine import engine_answers

    return engine_answers(timeout)


def say(message: str) -> None:
    print(f"docker engine: {message}", file=sys.stderr, flush=True)


def _installed(exe: str) -> bool:
    return bool(shutil.which(exe)) or Path("/usr/sbin", exe).exists()


def install() -> None:
    """apt-get install docker.io (dockerd, containerd, runc, docker-init), debootstrap and
    docker-compose."""
    missing = [pkg for pkg, exe in APT_PACKAGES.items() if not _installed(exe)]
    if not missing:
        return
    apt_install(missing, say)


def start_dockerd(flags: tuple[str, ...] = (), timeout: float = 60.0) -> bool:
    """Start dockerd detached (it outlives us, like a system service); True once it answers."""
    dockerd = shutil.which("dockerd") or "/usr/sbin/dockerd"
    LOG_FILE.parent.mkdir(parents=True, exist_ok=True)
    say(f"starting {dockerd} {' '.join(flags)} (log: {LOG_FILE})")
    with LOG_FILE.open("ab") as log:
        proc = subprocess.Popen([dockerd, *flags], stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if answers(2.0):
            say(f"dockerd {proc.pid} answers")
            return True
        if proc.poll() is not None:
            say(f"dockerd exited with {proc.returncode}; see {LOG_FILE}")
            return False
        time.sleep(0.5)
    say(f"dockerd did not answer within {timeout:.0f} s; stopping it")
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
    return False


def ensure() -> bool:
    """An engine that answers: there already, or installed and started here."""
    if may_set_up():
        install()  # no-op when all is there; docker-compose may be missing beside an engine
    if answers():
        return True
    if not may_set_up():
        say("no engine answers; not CI and not root, so none is started")
        return False
    if os.geteuid() != 0:
        say("dockerd must be started by root; start the docker service")
        return False
    for pidfile in (Path("/var/run/docker.pid"), Path("/run/docker.pid")):
        pidfile.unlink(missing_ok=True)  # a stale one (dockerd killed) stops dockerd starting
    return start_dockerd() or start_dockerd(FALLBACK_FLAGS)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m deploy.dockerd",
                                description="Find or start a Docker engine.")
    p.add_argument("--build-image", action="store_true",
                   help="then build the default task image (cached by content hash)")
    args = p.parse_args(argv)
    try:
        ok = ensure()
    except (OSError, subprocess.CalledProcessError) as err:
        say(f"cannot set up an engine: {err}")
        ok = False
    if not ok:
        return 1 if may_set_up() else 0
    if args.build_image:
        from task_image import image as task_image

        try:
            result = task_image.build(say=say)
        except RuntimeError as err:
            say(f"cannot build the task image: {err}")
            return 1
        how = "cached" if result.cached else "built"
        say(f"task image {result.tag} {how} in {result.seconds:.1f} s "
            f"({result.size_bytes / 1e6:.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
