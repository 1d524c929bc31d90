"""The master's settings, read once from the environment."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from common.temporal_names import DEFAULT_NAMESPACE, DEFAULT_RESOURCE_POOL


def _default_checkpoint_dir() -> str:
    state = os.environ.get("EPOCHAL_STATE_DIR") or str(Path.home() / ".epochal" / "cluster")
    return str(Path(state) / "checkpoints")


# Directories that hold data volumes on typical hosts; system directories (/etc, /usr, /root,
# /var, ...) are not among them.
DEFAULT_STORAGE_ROOTS = ("/mnt", "/media", "/data", "/srv", "/scratch", "/shared", "/tmp",
                         "/var/tmp", "/home")


@dataclass(frozen=True)
class Settings:
    db_url: str = "postgresql://postgres@127.0.0.1:54329/epochal"
    temporal_address: str = "127.0.0.1:7233"
    temporal_namespace: str = DEFAULT_NAMESPACE
    api_host: str = "127.0.0.1"
    api_port: int = 8080
    cluster_id: str = "epochal-local"
    cluster_name: str = "epochal"
    checkpoint_dir: str = field(default_factory=_default_checkpoint_dir)
    max_model_definition_bytes: int = 96 * 1024 * 1024
    # Resource pools whose scheduler the master starts at boot; `default` always exists.
    resource_pools: tuple[str, ...] = (DEFAULT_RESOURCE_POOL,)
    # Agents present it; trial tokens are signed with it. Random per process unless configured,
    # so a master without one accepts no agent it did not start.
    cluster_token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    # Set as `admin`'s password at start if admin has none yet.
    admin_password: str | None = None
    session_ttl: timedelta = timedelta(days=7)
    # Where shared_fs checkpoint storage may be (besides checkpoint_dir): trials write there
    # as the agent's user, and checkpoint GC deletes there.
    storage_roots: tuple[str, ...] = DEFAULT_STORAGE_ROOTS

    def allowed_storage_roots(self) -> tuple[str, ...]:
        return (self.checkpoint_dir, *self.storage_roots)

    @property
    def master_url(self) -> str:
        return f"http://{self.api_host}:{self.api_port}"

    @classmethod
    def from_env(cls) -> Settings:
        env = os.environ
        base = cls()
        return cls(
            db_url=env.get("EPOCHAL_DB_URL", base.db_url),
            temporal_address=env.get("EPOCHAL_TEMPORAL_ADDRESS", base.temporal_address),
            temporal_namespace=env.get("EPOCHAL_TEMPORAL_NAMESPACE", base.temporal_namespace),
            api_host=env.get("EPOCHAL_API_HOST", base.api_host),
            api_port=int(env.get("EPOCHAL_API_PORT", base.api_port)),
            cluster_id=env.get("EPOCHAL_CLUSTER_ID", base.cluster_id),
            checkpoint_dir=env.get("EPOCHAL_CHECKPOINT_DIR", base.checkpoint_dir),
            resource_pools=parse_pools(env.get("EPOCHAL_RESOURCE_POOLS", "")),
            cluster_token=env.get("EPOCHAL_CLUSTER_TOKEN") or base.cluster_token,
            admin_password=env.get("EPOCHAL_ADMIN_PASSWORD") or None,
            session_ttl=timedelta(hours=float(env.get("EPOCHAL_SESSION_TTL_HOURS", 24 * 7))),
            storage_roots=parse_roots(env.get("EPOCHAL_STORAGE_ROOTS")) or base.storage_roots,
        )


def parse_roots(text: str | None) -> tuple[str, ...]:
    """`/mnt:/data` -> ("/mnt", "/data"): absolute directories, normalized."""
    return tuple(os.path.normpath(p) for p in (text or "").split(":") if p.startswith("/"))


def parse_pools(text: str) -> tuple[str, ...]:
    """`default,gpu` -> ("default", "gpu"); `default` is always first."""
    names = [p.strip() for p in text.split(",") if p.strip()]
    return tuple(dict.fromkeys([DEFAULT_RESOURCE_POOL, *names]))
