"""What `epochal experiment create` checks before it submits: the config, validated locally,
and the model directory holding the script the entrypoint runs."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from types import SimpleNamespace
from typing import Any

from cli.client import (
    CliError,
)


def _invalid(path: str, errors: Sequence[str]) -> CliError:
    return CliError(f"invalid experiment config {path}:", list(errors), exit_code=2)


def read_config_text(path: Path, what: str = "experiment config") -> str:
    """The config file's text (exit 2 naming the file when it cannot be read)."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CliError(f"{what} {path} does not exist", exit_code=2) from None
    except IsADirectoryError:
        raise CliError(f"{what} {path} is a directory", exit_code=2) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read {what} {path}: {exc}", exit_code=2) from None


def config_mapping(text: str, path: Path, what: str = "experiment config") -> dict[str, Any]:
    """A config's YAML as a mapping, not validated (the master validates what a template
    completes; exit 2 with every error at once if it is no mapping)."""
    from common.expconf import ConfigError, load_config_yaml

    try:
        data = load_config_yaml(text, source=str(path))
    except ConfigError as exc:
        raise CliError(f"invalid {what} {path}:", list(exc.errors), exit_code=2) from None
    if not isinstance(data, dict):
        raise CliError(f"invalid {what} {path}:", ["a config is a mapping of config fields"],
                       exit_code=2)
    return data


def load_config(path: Path, partial: bool = False) -> tuple[str, Any]:
    """The config's text and model, validated locally (exit 2 with every error at once if it is
    wrong). A `partial` config (a template completes it on the master, which validates the
    merge) is only read as YAML."""
    text = read_config_text(path)
    if partial:
        data = config_mapping(text, path)
        return text, SimpleNamespace(entrypoint=data.get("entrypoint"))

    import yaml

    from common.expconf import PLACEHOLDER_STORAGE, ConfigError, parse_experiment_config

    try:
        parsed = parse_experiment_config(
            text, source=str(path), default_storage=PLACEHOLDER_STORAGE
        )
    except ConfigError as exc:
        errors = list(getattr(exc, "errors", None) or [str(exc)])
        raise _invalid(str(path), errors) from None
    except yaml.YAMLError as exc:  # the parser reports bad YAML itself; this is a safety net
        raise _invalid(str(path), [str(exc)]) from None
    return text, parsed


_PYTHON = re.compile(r"^(.*/)?python(\d+(\.\d+)?)?$")
# Options of the python interpreter that take a value as the next word.
_PYTHON_OPTIONS_WITH_VALUE = {"-W", "-X", "-Q"}


def entrypoint_script(entrypoint: Any) -> str | None:
    """The script an entrypoint like `python3 train.py --lr 1` runs (None when it runs no .py
    file of the model directory, e.g. `python3 -m package` or a command on the PATH)."""
    if isinstance(entrypoint, str):
        try:
            words = shlex.split(entrypoint)
        except ValueError:
            return None
    elif isinstance(entrypoint, list) and all(isinstance(w, str) for w in entrypoint):
        words = list(entrypoint)
    else:
        return None
    if not words or not _PYTHON.match(words[0]):
        return None
    rest = iter(words[1:])
    for word in rest:
        if word in ("-m", "-c", "-"):
            return None
        if word in _PYTHON_OPTIONS_WITH_VALUE:
            next(rest, None)
            continue
        if word.startswith("-"):
            continue
        return word if word.endswith(".py") else None
    return None


def check_entrypoint(config_path: Path, entrypoint: Any, directory: Path) -> str | None:
    """Fail (exit 2) when the entrypoint's script is not in the model directory; return the
    script's path inside it."""
    script = entrypoint_script(entrypoint)
    if script is None:
        return None
    if PurePosixPath(script).is_absolute():
        return None  # a script of the task image, not of the model directory
    if not (directory / script).is_file():
        raise CliError(
            f"the entrypoint of {config_path} runs {script}, but the model directory "
            f"{directory} has no file {script}",
            exit_code=2,
        )
    return PurePosixPath(script).as_posix().removeprefix("./")


