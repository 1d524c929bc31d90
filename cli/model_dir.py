"""Package a model directory as the contract's `modelDefinition`: a list of File objects.

File = `{"path", "type" (48 file, 53 directory), "content" (base64), "mode", "mtime", "uid",
"gid"}`, paths relative to the directory with `/` separators, directories before what they hold.
Patterns in `<dir>/.epochalignore` (gitignore syntax) leave files out, after a few defaults
(caches, VCS folders); a `!pattern` line brings a default back. The total file content may not
exceed `LIMIT` bytes: the master refuses more.
"""

from __future__ import annotations

import base64
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli.client import CliError

IGNORE_FILE = ".epochalignore"
LIMIT = 96 * 1024 * 1024
REGULAR_FILE = 48  # ord("0"), tar's REGTYPE
DIRECTORY = 53  # ord("5"), tar's DIRTYPE

DEFAULT_IGNORE = (
    "__pycache__/",
    "*.py[cod]",
    ".git/",
    ".hg/",
    ".svn/",
    ".venv/",
    ".mypy_cache/",
    ".pytest_cache/",
    ".ruff_cache/",
    ".ipynb_checkpoints/",
    "*.egg-info/",
    ".DS_Store",
)


class PackagingError(CliError):
    """The model directory cannot be sent as it is (exit 2: nothing was submitted)."""

    def __init__(self, message: str, details: list[str] | None = None):
        super().__init__(message, details, exit_code=2)


@dataclass
class _Entry:
    rel: str
    path: Path
    is_dir: bool
    size: int
    mode: int
    mtime: int


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def _ignore_spec(root: Path) -> Any:
    import pathspec  # lazy: only `experiment create` needs it

    lines = list(DEFAULT_IGNORE)
    ignore_path = root / IGNORE_FILE
    if ignore_path.exists():
        try:
            lines.extend(ignore_path.read_text(encoding="utf-8").splitlines())
        except (OSError, UnicodeDecodeError) as exc:
            raise PackagingError(f"cannot read {ignore_path}: {exc}") from None
    return pathspec.GitIgnoreSpec.from_lines(lines)


def _scan(root: Path) -> tuple[list[_Entry], list[str]]:
    """Every entry to send (not read yet), and the paths that could not be looked at."""
    spec = _ignore_spec(root)
    entries: list[_Entry] = []
    problems: list[str] = []

    def on_error(exc: OSError) -> None:
        where = Path(exc.filename).relative_to(root) if exc.filename else root
        problems.append(f"{where.as_posix()}: {exc.strerror or exc}")

    real_root = root.resolve()
    for parent, dirs, files in os.walk(root, onerror=on_error):
        parent_path = Path(parent)
        dirs.sort()
        kept = []
        for name in dirs:
            full = parent_path / name
            rel = full.relative_to(root).as_posix()
            if spec.match_file(rel + "/"):
                continue
            if full.is_symlink():
                # os.walk does not descend into linked directories; say so instead of
                # silently sending an empty folder.
                problems.append(f"{rel}: a symbolic link to a directory (not followed)")
                continue
            try:
                st = full.stat()
            except OSError as exc:
                problems.append(f"{rel}: {exc.strerror or exc}")
                continue
            kept.append(name)
            entries.append(_Entry(rel, full, True, 0, stat.S_IMODE(st.st_mode), int(st.st_mtime)))
        dirs[:] = kept
        for name in sorted(files):
            full = parent_path / name
            rel = full.relative_to(root).as_posix()
            if rel == IGNORE_FILE or spec.match_file(rel):
                continue
            try:
                st = full.stat()  # follows symbolic links: the target's content is sent
            except FileNotFoundError:
                problems.append(f"{rel}: missing (a broken symbolic link?)")
                continue
            except OSError as exc:
                problems.append(f"{rel}: {exc.strerror or exc}")
                continue
            if stat.S_ISDIR(st.st_mode):
                problems.append(f"{rel}: a symbolic link to a directory (not followed)")
                continue
            if full.is_symlink() and not _inside(full.resolve(), real_root):
                # Uploading a link's target from elsewhere (/etc/passwd, ~/.ssh/...) would
                # hand it to everyone who may download the model definition.
                problems.append(f"{rel}: a symbolic link to {full.resolve()}, outside the model "
                                "directory (copy the file in, or list it in .epochalignore)")
                continue
            if not stat.S_ISREG(st.st_mode):
                continue  # sockets, fifos, devices: nothing a training script could ship
            entries.append(
                _Entry(rel, full, False, st.st_size, stat.S_IMODE(st.st_mode), int(st.st_mtime))
            )
    return entries, problems


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _largest(entries: list[_Entry], count: int = 5) -> list[str]:
    """The biggest top-level files and folders, to say what to put in .epochalignore."""
    totals: dict[str, int] = {}
    for e in entries:
        if e.is_dir:
            continue
        top, sep, _ = e.rel.partition("/")
        key = top + "/" if sep else top
        totals[key] = totals.get(key, 0) + e.size
    biggest = sorted(totals.items(), key=lambda kv: kv[1], reverse=True)[:count]
    return [f"{name}: {human(n)}" for name, n in biggest]


def require_dir(model_dir: str | Path) -> Path:
    root = Path(model_dir)
    if not root.exists():
        raise PackagingError(f"model directory {model_dir} does not exist")
    if not root.is_dir():
        raise PackagingError(f"model directory {model_dir} is not a directory")
    return root


def package(model_dir: str | Path, limit: int | None = None) -> list[dict[str, Any]]:
    """The model directory as a list of File objects, or a PackagingError saying what is wrong."""
    limit = LIMIT if limit is None else limit
    root = require_dir(model_dir).resolve()

    entries, problems = _scan(root)
    if problems:
        raise PackagingError(
            f"cannot read some files of the model directory {model_dir} "
            f"(fix them or list them in {IGNORE_FILE}):",
            problems,
        )
    total = sum(e.size for e in entries)
    if total > limit:
        raise PackagingError(
            f"model directory {model_dir} holds {human(total)} of files, more than the "
            f"{human(limit)} limit; list what training does not need (data, checkpoints, "
            f"outputs) in {root / IGNORE_FILE} (gitignore syntax). Largest entries:",
            _largest(entries),
        )

    files: list[dict[str, Any]] = []
    unreadable: list[str] = []
    for e in entries:
        content = b""
        if not e.is_dir:
            try:
                content = e.path.read_bytes()
            except OSError as exc:
                unreadable.append(f"{e.rel}: {exc.strerror or exc}")
                continue
        files.append(
            {
                "path": e.rel,
                "type": DIRECTORY if e.is_dir else REGULAR_FILE,
                "content": base64.b64encode(content).decode("ascii"),
                "mode": e.mode,
                "mtime": e.mtime,
                "uid": 0,
                "gid": 0,
            }
        )
    if unreadable:
        raise PackagingError(
            f"cannot read some files of the model directory {model_dir} "
            f"(fix them or list them in {IGNORE_FILE}):",
            unreadable,
        )
    return files
