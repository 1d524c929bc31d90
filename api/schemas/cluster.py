"""The master: its health, what it says about itself, its config and its message."""

from __future__ import annotations

from typing import Any

from api.schemas import Answer


class Health(Answer):
    ok: bool


class ClusterMessage(Answer):
    """Determined's v1ClusterMessage."""

    message: str
    startTime: str
    endTime: str | None = None
    createdTime: str | None = None


class ClusterMessageAnswer(Answer):
    """Determined's v1GetClusterMessageResponse (null when there is none)."""

    clusterMessage: ClusterMessage | None


class MasterConfig(Answer):
    """Determined's v1GetMasterConfigResponse: the config, secrets hidden."""

    config: dict[str, Any]


class MasterInfo(Answer):
    """Determined's v1GetMasterResponse."""

    version: str
    masterId: str
    clusterId: str
    clusterName: str
    telemetryEnabled: bool
    hasCustomLogo: bool
    strictJobQueueControl: bool
    rbacEnabled: bool
    userManagementEnabled: bool
    product: str
    featureSwitches: list[str]
    ssoProviders: list[dict[str, Any]]
    clusterMessage: ClusterMessage | None = None


class Telemetry(Answer):
    enabled: bool


class DeterminedInfo(Answer):
    """Determined's `GET /info` answer (snake_case), which `det` reads before anything else."""

    version: str
    epochal_version: str
    master_id: str
    cluster_id: str
    cluster_name: str
    telemetry: Telemetry
