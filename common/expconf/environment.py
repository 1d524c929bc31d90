"""`environment` (image, variables), `bind_mounts` and `reproducibility`."""

from typing import Any

from pydantic import Field, field_validator

from common.expconf._base import NotActedOn, Path, _choices, _describe, _fail, _Model

_DEVICE_KEYS = frozenset({"cpu", "cuda", "gpu", "rocm"})


def _is_per_device(value: Any) -> bool:
    """Determined's ``{cpu: ..., cuda: ...}`` form of a per-device setting."""
    return isinstance(value, dict) and bool(value) and set(value) <= _DEVICE_KEYS


def _env_value(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    return None


def _normalize_env(value: Any) -> Any:
    """``["K=V", ...]``, ``{K: V}`` or ``{cpu: [...], cuda: [...]}`` -> ``{K: V}``."""
    errors: list[tuple[Path, str]] = []
    result: dict[str, str] = {}
    origin: dict[str, str] = {}

    def add_list(items: Any, where: Path) -> None:
        if not isinstance(items, list):
            errors.append((where, 'must be a list of "KEY=VALUE" strings'))
            return
        for i, item in enumerate(items):
            key, sep, val = item.partition("=") if isinstance(item, str) else ("", "", "")
            if not sep or not key:
                errors.append(((*where, i), f'must be "KEY=VALUE" (got {_describe(item)})'))
                continue
            label = ".".join(map(str, where)) or "list"
            if key in result and result[key] != val and origin[key] != label:
                errors.append(
                    (
                        (*where, i),
                        f'"{key}" differs from its value for {origin[key]}; '
                        "Epochal sets the same variables on every device",
                    )
                )
                continue
            result[key], origin[key] = val, label

    if value is None:
        return {}
    if _is_per_device(value):
        for device in sorted(value):
            if value[device] is not None:
                add_list(value[device], (device,))
    elif isinstance(value, list):
        add_list(value, ())
    elif isinstance(value, dict):
        for key, val in value.items():
            text = _env_value(val)
            if not isinstance(key, str) or not key or "=" in key:
                errors.append(((str(key),), "must be a variable name"))
            elif text is None:
                errors.append(((key,), f"must be a string or a number (got {_describe(val)})"))
            else:
                result[key] = text
    else:
        return value  # the strict dict type reports it
    if errors:
        raise _fail(*errors)
    return result


class EnvironmentConfig(_Model):
    # One image, or Determined's image per device type ({cpu: ..., cuda: ...}), which the
    # Docker runtime picks from by the run's slots.
    image: str | dict[str, str] | None = None
    environment_variables: dict[str, str] = Field(default_factory=dict)
    force_pull_image: bool = False  # pull the image even when the agent has it
    pod_spec: NotActedOn = None
    ports: NotActedOn = None
    registry_auth: NotActedOn = None
    add_capabilities: NotActedOn = None
    drop_capabilities: NotActedOn = None
    proxy_ports: NotActedOn = None

    @field_validator("image", mode="before")
    @classmethod
    def _one_image(cls, value: Any) -> Any:
        if value is None or isinstance(value, str):
            return value
        if not _is_per_device(value):
            raise _fail(
                (
                    (),
                    "must be an image name or a mapping of "
                    f"{_choices(sorted(_DEVICE_KEYS))} to image names (got {_describe(value)})",
                )
            )
        bad = [(k, v) for k, v in value.items() if v is not None and not isinstance(v, str)]
        if bad:
            raise _fail(*(((k,), f"must be an image name (got {_describe(v)})") for k, v in bad))
        images = {v for v in value.values() if v is not None}
        if len(images) > 1:
            return {k: v for k, v in value.items() if v is not None}
        return images.pop() if images else None

    @field_validator("environment_variables", mode="before")
    @classmethod
    def _env_to_dict(cls, value: Any) -> Any:
        return _normalize_env(value)


class BindMount(_Model):
    host_path: str = Field(min_length=1)
    container_path: str = Field(min_length=1)
    read_only: bool = False
    propagation: NotActedOn = None

    @field_validator("host_path")
    @classmethod
    def _absolute_host_path(cls, value: str) -> str:
        if not value.startswith("/"):
            raise _fail(((), f"must be an absolute path (got {_describe(value)})"))
        return value

    @field_validator("container_path")
    @classmethod
    def _not_the_working_directory(cls, value: str) -> str:
        if value == ".":
            raise _fail(((), 'must not be "." (the trial\'s working directory)'))
        return value


class ReproducibilityConfig(_Model):
    experiment_seed: int | None = Field(default=None, ge=0)


