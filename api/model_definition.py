"""The model definition: the files of an experiment's code, stored as one .tar.gz.

The API receives Determined's list of File objects (base64 content) and keeps a tarball, which
agents download and extract into each trial's working directory, and the dashboard and
Determined's web UI list and show (file_tree, file_content).
"""

from __future__ import annotations

import base64
import binascii
import io
import mimetypes
import tarfile
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Any

from api.errors import ApiError

REGULAR_FILE = 48  # ord("0"), tar's typeflag for a regular file
DIRECTORY = 53  # ord("5")


def _safe_path(raw: str) -> str:
    path = PurePosixPath(raw)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise ApiError(400, f"modelDefinition: unsafe path {raw!r}", [f"modelDefinition: {raw}"])
    return str(path)


def build_tarball(files: list[dict[str, Any]], limit_bytes: int) -> tuple[bytes, int]:
    """(tar.gz bytes, total content size); 413 when the content is over the limit."""
    decoded: list[tuple[dict[str, Any], bytes]] = []
    total = 0
    for index, item in enumerate(files):
        try:
            content = base64.b64decode(item.get("content") or "", validate=True)
        except (binascii.Error, ValueError) as err:
            raise ApiError(
                400,
                f"modelDefinition[{index}].content: expected base64 ({item.get('path')!r})",
            ) from err
        total += len(content)
        decoded.append((item, content))
    if total > limit_bytes:
        raise ApiError(
            413,
            f"model definition is {total / 2**20:.1f} MiB, over the limit of "
            f"{limit_bytes / 2**20:.0f} MiB; list large files in .epochalignore",
        )
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=6) as tar:
        for item, content in decoded:
            info = tarfile.TarInfo(_safe_path(str(item.get("path", ""))))
            info.mtime = int(item.get("mtime") or 0)
            if int(item.get("type") or REGULAR_FILE) == DIRECTORY:
                info.type = tarfile.DIRTYPE
                info.mode = int(item.get("mode") or 0o755)
                tar.addfile(info)
            else:
                info.mode = int(item.get("mode") or 0o644)
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue(), total


def file_tree(tgz: bytes) -> list[dict[str, Any]]:
    """The stored files as Determined's FileNode tree (GetModelDefTree): directories first,
    then files, each level by name."""
    root: dict[str, Any] = {"files": {}}
    with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
        for member in tar:
            parts = PurePosixPath(member.name).parts
            node = root
            for depth, part in enumerate(parts):
                path = "/".join(parts[:depth + 1])
                last = depth == len(parts) - 1
                node = node["files"].setdefault(part, {
                    "path": path, "name": part, "isDir": not last or member.isdir(),
                    "contentLength": 0, "contentType": "", "modifiedTime": None, "files": {}})
                if last:
                    node["isDir"] = member.isdir()
                    node["contentLength"] = 0 if member.isdir() else member.size
                    node["modifiedTime"] = datetime.fromtimestamp(member.mtime, UTC).isoformat()
                    node["contentType"] = "" if member.isdir() else (
                        mimetypes.guess_type(part)[0] or "text/plain")

    def listed(children: dict[str, Any]) -> list[dict[str, Any]]:
        ordered = sorted(children.values(), key=lambda n: (not n["isDir"], n["name"]))
        return [{**n, "files": listed(n["files"])} for n in ordered]

    return listed(root["files"])


def file_content(tgz: bytes, path: str) -> bytes | None:
    """One stored file's bytes (GetModelDefFile); None if there is no such regular file."""
    wanted = str(PurePosixPath(path))
    with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
        for member in tar:
            if member.isfile() and str(PurePosixPath(member.name)) == wanted:
                extracted = tar.extractfile(member)
                return extracted.read() if extracted is not None else None
    return None
