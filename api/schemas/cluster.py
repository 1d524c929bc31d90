"""The master: its health and what it says about itself."""

from __future__ import annotations

from typing import Any

from api.schemas import Answer


class Health(Answer):
    ok: bool


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
