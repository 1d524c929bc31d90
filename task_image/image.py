"""Epochal's default task image, built with no container registry.

Two layers, each cached by a content hash:

1. `epochal-task-base:<hash of the recipe>`: a Debian root filesystem made by
   `debootstrap --variant=minbase --include=<packages.txt>` from this machine's own Debian
   package sources (the first `.../debian` URI in /etc/apt/sources.list*, or
   $EPOCHAL_DEBIAN_MIRROR), trimmed (compilers and headers pulled in by scipy's dependency on
   pythran, docs, apt caches), then `docker import`ed. Needs root (debootstrap chroots).
2. `epochal-task:<hash of the recipe and the harness sources>`: the harness package copied into
   /usr/lib/python3/dist-packages by a `docker build` FROM the local base image (no pull).

The harness is installed in the image rather than bind-mounted from the agent's site-packages:
the image's Python is Debian's, not the agent's interpreter, and an image that holds its harness
runs the same on any agent; the tag's hash ties it to the harness sources, so an agent with
another harness asks for another image (and only the small second layer is rebuilt). A second
build with the same inputs is a no-op.

    python -m task_image.build   (also `epochal image build`)
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors

logger = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
PACKAGES_FILE = HERE / "packages.txt"
SUITE = "bookworm"  # Debian 12: python3 is 3.11
DEFAULT_MIRROR = "http://deb.debian.org/debian"
BASE_REPOSITORY = "epochal-task-base"
REPOSITORY = "epochal-task"
# Bump to rebuild every image when the way it is made changes.
RECIPE_VERSION = "1"
# Pulled in by python3-scipy's dependency on pythran, never needed to run a trial.
TRIM_PACKAGES = (
    "python3-pythran", "python3-all-dev", "python3-dev", "python3.11-dev", "libpython3.11-dev",
    "libpython3-dev", "libpython3-all-dev", "python3-all", "g++", "g++-12", "gcc", "gcc-12",
    "cpp", "cpp-12", "libstdc++-12-dev", "libgcc-12-dev", "libc6-dev", "linux-libc-dev",
    "libc-dev-bin", "libexpat1-dev", "zlib1g-dev", "libcrypt-dev", "libnsl-dev", "libtirpc-dev",
    "libxsimd-dev", "libboost-dev", "libboost1.74-dev", "rpcsvc-proto", "binutils",
    "binutils-common", "binutils-x86-64-linux-gnu", "libbinutils", "libctf0", "libctf-nobfd0",
    "libgprofng0", "libjs-sphinxdoc", "libjs-underscore", "libjs-jquery", "python3-ply",
    "python3-gast", "python3-beniget", "python3-pygments",
)
TRIM_PATHS = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale",
              "var/cache/apt/archives", "var/lib/apt/lists", "usr/include")


def packages() -> list[str]:
    lines = PACKAGES_FILE.read_text().splitlines()
    return [w for line in lines if (w := line.split("#", 1)[0].strip())]


def harness_dir() -> Path:
    import harness

    return Path(harness.__file__).resolve().parent


def _harness_files() -> Iterator[tuple[str, Path]]:
    root = harness_dir()
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" not in path.parts:
            yield path.relative_to(root).as_posix(), path


def _base_hash() -> Any:
    h = hashlib.sha256()
    for part in (RECIPE_VERSION, SUITE, *packages(), *TRIM_PACKAGES, *TRIM_PATHS):
        h.update(part.encode() + b"\0")
    return h


def base_image_tag() -> str:
    return f"{BASE_REPOSITORY}:{_base_hash().hexdigest()[:12]}"


def task_image_tag() -> str:
    """The default image of this installation: the recipe's hash and the harness's."""
    h = _base_hash()
    for rel, path in _harness_files():
        h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{REPOSITORY}:{h.hexdigest()[:12]}"


def debian_mirror(sources: Path = Path("/etc/apt")) -> str:
    """The Debian archive this machine installs from (`deb822` .sources or one-line lists)."""
    env = os.environ.get("EPOCHAL_DEBIAN_MIRROR")
    if env:
        return env.rstrip("/")
    files = [sources / "sources.list", *sorted((sources / "sources.list.d").glob("*"))]
    for f in files:
        if f.suffix not in (".list", ".sources") or not f.is_file():
            continue
        with contextlib.suppress(OSError):
            text = f.read_text()
            for uri in re.findall(r"^\s*(?:URIs:\s*|deb\s+(?:\[[^]]*\]\s+)?)(\S+)", text,
                                  re.MULTILINE):
                if re.search(r"/debian/?$", uri):
                    return str(uri.rstrip("/"))
    return DEFAULT_MIRROR


@dataclass
class BuildResult:
    tag: str
    cached: bool
    seconds: float
    size_bytes: int


def image_exists(client: docker.DockerClient, tag: str) -> bool:
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def build(
    client: docker.DockerClient | None = None,
    *,
    work_dir: Path | None = None,
    say: Callable[[str], None] = logger.info,
) -> BuildResult:
    """Build the task image unless an image with its tag exists; the tag and how long it took."""
    started = time.monotonic()
    client = client or docker.from_env(timeout=600)
    tag = task_image_tag()
    if image_exists(client, tag):
        return BuildResult(tag, True, time.monotonic() - started, _size(client, tag))
    base = base_image_tag()
    if not image_exists(client, base):
        _build_base(client, base, work_dir=work_dir, say=say)
    else:
        say(f"base image {base} is there already")
    _build_top(client, base, tag, say=say)
    return BuildResult(tag, False, time.monotonic() - started, _size(client, tag))


def _size(client: docker.DockerClient, tag: str) -> int:
    return int(client.images.get(tag).attrs.get("Size") or 0)


def _build_base(client: docker.DockerClient, tag: str, *, work_dir: Path | None,
                say: Callable[[str], None]) -> None:
    debootstrap = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
    if not Path(debootstrap).exists():
        raise RuntimeError("debootstrap is not installed (apt-get install debootstrap); it makes "
                           "the task image's root filesystem from Debian packages")
    if os.geteuid() != 0:
        raise RuntimeError("building the task image's base needs root (debootstrap chroots)")
    mirror = debian_mirror()
    parent = work_dir or Path(os.environ.get("TMPDIR") or "/var/tmp")
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="epochal-rootfs-", dir=parent))
    try:
        root = tmp / "rootfs"
        say(f"debootstrap {SUITE} from {mirror} with {', '.join(packages())}")
        _check([debootstrap, "--variant=minbase", f"--include={','.join(packages())}", SUITE,
                str(root), mirror])
        _trim(root, say)
        say(f"importing the root filesystem as {tag}")
        repo, _, version = tag.partition(":")
        with subprocess.Popen(["tar", "--numeric-owner", "--one-file-system", "-C", str(root),
                               "-c", "."], stdout=subprocess.PIPE) as tar:
            assert tar.stdout is not None
            client.api.import_image_from_stream(
                tar.stdout, repository=repo, tag=version,
                changes=["ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                         "ENV LANG=C.UTF-8", "ENV PYTHONUNBUFFERED=1", 'CMD ["python3"]'])
        if tar.returncode:
            raise RuntimeError(f"tar of the root filesystem failed ({tar.returncode})")
        if not image_exists(client, tag):
            raise RuntimeError(f"docker import did not make {tag}")
    finally:
        _remove_rootfs(tmp)


def _remove_rootfs(tmp: Path) -> None:
    """Remove the scratch root filesystem, never crossing into a mount left inside it
    (debootstrap mounts /proc and /sys in the chroot while it installs)."""
    with open("/proc/self/mounts", encoding="utf-8") as f:
        mounted = [line.split()[1] for line in f if line.split()[1].startswith(str(tmp) + "/")]
    for point in sorted(mounted, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False)
    subprocess.run(["rm", "-rf", "--one-file-system", str(tmp)], check=False)


def _trim(root: Path, say: Callable[[str], None]) -> None:
    listed = subprocess.run(["chroot", str(root), "dpkg-query", "-W", "-f=${Package}\n"],
                            capture_output=True, text=True, check=True).stdout.split()
    present = [p for p in TRIM_PACKAGES if p in listed]
    if present:
        say(f"removing {len(present)} build-only packages")
        _check(["chroot", str(root), "dpkg", "--purge", "--force-depends", *present])
    for rel in TRIM_PATHS:
        path = root / rel
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
            path.mkdir()


def _build_top(client: docker.DockerClient, base: str, tag: str, *,
               say: Callable[[str], None]) -> None:
    with tempfile.TemporaryDirectory(prefix="epochal-image-") as tmp:
        ctx = Path(tmp)
        for rel, path in _harness_files():
            dest = ctx / "harness" / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)
        (ctx / "Dockerfile").write_text(
            f"FROM {base}\n"
            "COPY harness /usr/lib/python3/dist-packages/harness\n"
            "RUN python3 -c 'import harness.core, httpx, numpy, sklearn, asyncssh'\n"
            "LABEL ai.epochal.image=task\n")
        say(f"adding the harness: {tag}")
        try:
            client.images.build(path=str(ctx), tag=tag, pull=False, rm=True, forcerm=True,
                                network_mode="none")
        except docker.errors.BuildError as err:
            lines = "".join(str(c.get("stream") or c.get("error") or "") for c in err.build_log)
            raise RuntimeError(f"building {tag} failed: {err}\n{lines}") from err


def _check(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if proc.returncode:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-20:])
        raise RuntimeError(f"{cmd[0]} failed ({proc.returncode}):\n{tail}")
