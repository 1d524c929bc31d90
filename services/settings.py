"""What services read of the master's settings (api/settings.py's `Settings` has it all):
declared here, below the API, so a route hands its settings on as they are."""

from __future__ import annotations

from typing import Any, Protocol


class StorageSettings(Protocol):
    """Where checkpoints and mounts may be: the cluster's storage and the roots it allows."""

    @property
    def checkpoint_storage(self) -> dict[str, Any] | None: ...

    def default_storage(self) -> dict[str, Any]: ...

    def allowed_storage_roots(self) -> tuple[str, ...]: ...
