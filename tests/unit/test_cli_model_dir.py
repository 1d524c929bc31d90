"""Packaging a model directory: File objects, .epochalignore, size limit, unreadable files."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from cli import model_dir
from cli.experiment_config import entrypoint_script


def write(path: Path, content: bytes | str = "x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        content = content.encode()
    path.write_bytes(content)
    return path


def by_path(files: list[dict]) -> dict[str, dict]:
    return {f["path"]: f for f in files}


def test_files_and_directories_as_contract_file_objects(tmp_path: Path) -> None:
    write(tmp_path / "train.py", "print('hi')\n")
    script = write(tmp_path / "pkg" / "model.py", b"\x00\x01binary")
    script.chmod(0o755)
    os.utime(script, (1_700_000_000, 1_700_000_000))

    files = by_path(model_dir.package(tmp_path))

    assert set(files) == {"train.py", "pkg", "pkg/model.py"}
    train = files["train.py"]
    assert train["type"] == 48
    assert base64.b64decode(train["content"]) == b"print('hi')\n"
    assert set(train) == {"path", "type", "content", "mode", "mtime", "uid", "gid"}
    assert files["pkg"]["type"] == 53
    assert files["pkg"]["content"] == ""
    model = files["pkg/model.py"]
    assert base64.b64decode(model["content"]) == b"\x00\x01binary"
    assert model["mode"] == 0o755
    assert model["mtime"] == 1_700_000_000
    paths = [f["path"] for f in model_dir.package(tmp_path)]
    assert paths.index("pkg") < paths.index("pkg/model.py")


def test_epochalignore_is_honoured(tmp_path: Path) -> None:
    write(tmp_path / "train.py")
    write(tmp_path / "data" / "big.bin")
    write(tmp_path / "src" / "data" / "keep.py")  # `/data/` is anchored to the root
    write(tmp_path / "out.ckpt")
    write(tmp_path / "src" / "nested.ckpt")
    write(tmp_path / "notes.txt")
    write(tmp_path / "__pycache__" / "train.cpython-311.pyc")
    write(tmp_path / ".epochalignore", "# comment\n/data/\n*.ckpt\n!notes.txt\n")

    paths = set(by_path(model_dir.package(tmp_path)))

    assert paths == {"train.py", "src", "src/data", "src/data/keep.py", "notes.txt"}


def test_negation_brings_back_a_default_ignore(tmp_path: Path) -> None:
    write(tmp_path / "train.py")
    write(tmp_path / "precompiled.pyc")
    write(tmp_path / ".epochalignore", "!precompiled.pyc\n")

    assert "precompiled.pyc" in by_path(model_dir.package(tmp_path))


def test_size_limit_names_directory_size_limit_and_epochalignore(tmp_path: Path) -> None:
    write(tmp_path / "train.py")
    write(tmp_path / "data" / "a.bin", b"0" * 3000)
    write(tmp_path / "ignored.bin", b"0" * 5000)
    write(tmp_path / ".epochalignore", "ignored.bin\n")

    with pytest.raises(model_dir.PackagingError) as caught:
        model_dir.package(tmp_path, limit=2048)

    err = caught.value
    assert err.exit_code == 2
    assert str(tmp_path) in err.message
    assert "2.9 KiB" in err.message  # what it holds (ignored files not counted)
    assert "2.0 KiB limit" in err.message
    assert ".epochalignore" in err.message
    assert err.details[0].startswith("data/: 2.9 KiB")
    # Under the limit once the ignore file leaves the data out.
    write(tmp_path / ".epochalignore", "ignored.bin\ndata/\n")
    assert set(by_path(model_dir.package(tmp_path, limit=2048))) == {"train.py"}


def test_default_limit_is_96_mib() -> None:
    assert model_dir.LIMIT == 96 * 1024 * 1024


def test_broken_symlink_is_named(tmp_path: Path) -> None:
    write(tmp_path / "train.py")
    (tmp_path / "weights.pt").symlink_to(tmp_path / "gone.pt")

    with pytest.raises(model_dir.PackagingError) as caught:
        model_dir.package(tmp_path)

    assert caught.value.details == ["weights.pt: missing (a broken symbolic link?)"]


def test_a_symlink_within_the_directory_sends_its_target(tmp_path: Path) -> None:
    write(tmp_path / "train.py")
    write(tmp_path / "lib" / "shared.py", "shared = 1\n")
    (tmp_path / "shared.py").symlink_to(tmp_path / "lib" / "shared.py")

    files = by_path(model_dir.package(tmp_path))

    assert base64.b64decode(files["shared.py"]["content"]) == b"shared = 1\n"


def test_a_symlink_out_of_the_directory_is_refused_naming_it(tmp_path: Path) -> None:
    target = write(tmp_path.parent / f"{tmp_path.name}-outside.py", "secret = 1\n")
    model = tmp_path / "model"
    write(model / "train.py")
    (model / "shared.py").symlink_to(target)

    with pytest.raises(model_dir.PackagingError) as caught:
        model_dir.package(model)

    assert caught.value.details == [
        f"shared.py: a symbolic link to {target.resolve()}, outside the model directory "
        "(copy the file in, or list it in .epochalignore)"]


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(model_dir.PackagingError, match="does not exist"):
        model_dir.package(tmp_path / "nope")


@pytest.mark.parametrize(
    ("entrypoint", "script"),
    [
        ("python3 train.py", "train.py"),
        ("python train.py --epochs 3", "train.py"),
        ("python3 -u src/train.py", "src/train.py"),
        ("python3.11 -W ignore ./train.py", "./train.py"),
        (["python3", "train.py"], "train.py"),
        ("python3 -m torch.distributed.run train.py", None),
        ("bash run.sh", None),
        ("model_def:Trial", None),
        ("python3", None),
    ],
)
def test_entrypoint_script(entrypoint: object, script: str | None) -> None:
    assert entrypoint_script(entrypoint) == script
