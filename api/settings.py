"""The master's settings, read once from the environment."""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from common.checkpoint_storage import public_storage
from common.flags import flag
from common.temporal_connection import TemporalSecurity
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
    # TLS and credentials for a Temporal that authenticates clients (EPOCHAL_TEMPORAL_TLS_*).
    temporal_security: TemporalSecurity = field(default_factory=TemporalSecurity)
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
    # The cluster's default checkpoint storage when it is not shared_fs at checkpoint_dir:
    # `{"type": "s3", "bucket", "endpoint_url", "prefix", "access_key", "secret_key"}`. Its keys
    # are the cluster's: experiments get the storage without them (common/checkpoint_storage.py).
    checkpoint_storage: dict[str, Any] | None = None
    # Make the default storage's bucket at boot if it is missing (EPOCHAL_CREATE_BUCKET).
    create_bucket: bool = False
    # Temporal's web UI (EPOCHAL_TEMPORAL_UI_URL): the one origin whose pages may ask the
    # master to decode payloads for an admin (api/routes/temporal_codec.py).
    temporal_ui_url: str | None = None
    # Where users reach the dashboard (EPOCHAL_DASHBOARD_URL; the API's address unless given):
    # Temporal's UI shows an experiment's page there, from its memo.
    dashboard_url: str | None = None
    # Days a trial's logs are kept after it ends when neither it nor its experiment says
    # (EPOCHAL_LOG_RETENTION_DAYS; -1: for ever, Determined's default), and how often the master
    # deletes expired ones (EPOCHAL_LOG_RETENTION_INTERVAL_SECONDS): activities/log_retention.py.
    log_retention_days: int = -1
    log_retention_interval: float = 3600.0

    def allowed_storage_roots(self) -> tuple[str, ...]:
        return (self.checkpoint_dir, *self.storage_roots)

    def default_storage(self) -> dict[str, Any]:
        """What an experiment without `checkpoint_storage` gets (no secret keys)."""
        if self.checkpoint_storage:
            return public_storage(self.checkpoint_storage)
        return {"type": "shared_fs", "host_path": self.checkpoint_dir}

    @property
    def master_url(self) -> str:
        return f"http://{self.api_host}:{self.api_port}"

    def experiment_page(self, experiment_id: int) -> str:
        """The dashboard's page of an experiment."""
        return f"{self.dashboard_url or self.master_url}/experiments/{experiment_id}"

    @classmethod
    def from_env(cls) -> Settings:
        env = os.environ
        base = cls()
        return cls(
            db_url=env.get("EPOCHAL_DB_URL", base.db_url),
            temporal_address=env.get("EPOCHAL_TEMPORAL_ADDRESS", base.temporal_address),
            temporal_namespace=env.get("EPOCHAL_TEMPORAL_NAMESPACE", base.temporal_namespace),
            temporal_security=TemporalSecurity.from_env(env),
            api_host=env.get("EPOCHAL_API_HOST", base.api_host),
            api_port=int(env.get("EPOCHAL_API_PORT", base.api_port)),
            cluster_id=env.get("EPOCHAL_CLUSTER_ID", base.cluster_id),
            checkpoint_dir=env.get("EPOCHAL_CHECKPOINT_DIR", base.checkpoint_dir),
            resource_pools=parse_pools(env.get("EPOCHAL_RESOURCE_POOLS", "")),
            cluster_token=env.get("EPOCHAL_CLUSTER_TOKEN") or base.cluster_token,
            admin_password=env.get("EPOCHAL_ADMIN_PASSWORD") or None,
            session_ttl=timedelta(hours=float(env.get("EPOCHAL_SESSION_TTL_HOURS", 24 * 7))),
            storage_roots=parse_roots(env.get("EPOCHAL_STORAGE_ROOTS")) or base.storage_roots,
            checkpoint_storage=parse_storage(env.get("EPOCHAL_CHECKPOINT_STORAGE")),
            create_bucket=flag("EPOCHAL_CREATE_BUCKET", env.get("EPOCHAL_CREATE_BUCKET")),
            temporal_ui_url=(env.get("EPOCHAL_TEMPORAL_UI_URL") or "").rstrip("/") or None,
            dashboard_url=(env.get("EPOCHAL_DASHBOARD_URL") or "").rstrip("/") or None,
            log_retention_days=parse_retention_days(env.get("EPOCHAL_LOG_RETENTION_DAYS")),
            log_retention_interval=parse_interval(
                env.get("EPOCHAL_LOG_RETENTION_INTERVAL_SECONDS"), base.log_retention_interval),
        )


def parse_storage(text: str | None) -> dict[str, Any] | None:
    """EPOCHAL_CHECKPOINT_STORAGE: the cluster's default storage as a JSON object, S3 only."""
    if not text:
        return None
    try:
        storage = json.loads(text)
    except ValueError as err:
        raise ValueError(f"EPOCHAL_CHECKPOINT_STORAGE: expected a JSON object: {err}") from None
    if not isinstance(storage, dict) or storage.get("type") != "s3" or not storage.get("bucket"):
        raise ValueError('EPOCHAL_CHECKPOINT_STORAGE: expected {"type": "s3", "bucket": ..., '
                         '"endpoint_url": ..., "access_key": ..., "secret_key": ...}')
    return storage


def parse_retention_days(text: str | None) -> int:
    """EPOCHAL_LOG_RETENTION_DAYS: -1 (keep for ever, the default) to 32767, as Determined's."""
    if not text:
        return -1
    if not text.strip().lstrip("-").isdigit() or not -1 <= int(text) <= 32767:
        raise ValueError(f"EPOCHAL_LOG_RETENTION_DAYS: expected a whole number of days from -1 "
                         f"(keep for ever) to 32767, got {text!r}")
    return int(text)


def parse_interval(text: str | None, default: float) -> float:
    """EPOCHAL_LOG_RETENTION_INTERVAL_SECONDS: from 1 s to a week."""
    if not text:
        return default
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not 1 <= seconds <= 7 * 24 * 3600:
        raise ValueError("EPOCHAL_LOG_RETENTION_INTERVAL_SECONDS: expected seconds from 1 to "
                         f"604800, got {text!r}")
    return seconds


def parse_roots(text: str | None) -> tuple[str, ...]:
    """`/mnt:/data` -> ("/mnt", "/data"): absolute directories, normalized."""
    return tuple(os.path.normpath(p) for p in (text or "").split(":") if p.startswith("/"))


def parse_pools(text: str) -> tuple[str, ...]:
    """`default,gpu` -> ("default", "gpu"); `default` is always first."""
    names = [p.strip() for p in text.split(",") if p.strip()]
    return tuple(dict.fromkeys([DEFAULT_RESOURCE_POOL, *names]))
