"""The cluster: master info and health (agents are in api/routes/agents.py)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from api.deps import AppSettings, Pool
from api.queries import cluster as cluster_queries
from api.schemas import answers
from api.schemas.cluster import DeterminedInfo, Health, MasterInfo

router = APIRouter(tags=["cluster"])

VERSION = "0.1.0"
# The Determined release whose REST API Epochal speaks. `det` compares its own version with the
# one `GET /info` answers before every command and warns on any difference.
DETERMINED_API_VERSION = "0.38.1"


@router.get("/health", **answers(Health))
async def health(pool: Pool) -> dict[str, bool]:
    await cluster_queries.ping(pool)
    return {"ok": True}


def _master_fields(settings: AppSettings) -> dict[str, Any]:
    return {
        "masterId": settings.cluster_id,
        "clusterId": settings.cluster_id,
        "clusterName": settings.cluster_name,
        "telemetryEnabled": False,
        "hasCustomLogo": False,
        "strictJobQueueControl": False,
        "rbacEnabled": False,
        "userManagementEnabled": True,
        "product": "PRODUCT_UNSPECIFIED",
        "featureSwitches": [],
        "ssoProviders": [],
    }


@router.get("/api/v1/master", **answers(MasterInfo))
async def master_info(settings: AppSettings) -> dict[str, Any]:
    """Determined's v1GetMasterResponse (`det master info`); `version` is Epochal's."""
    return {"version": VERSION, **_master_fields(settings)}


@router.get("/info", **answers(DeterminedInfo))
async def determined_info(settings: AppSettings) -> dict[str, Any]:
    """What `det` asks first (unauthenticated), in Determined's snake_case: the version it
    compares is the Determined release Epochal's API matches."""
    return {
        "version": DETERMINED_API_VERSION,
        "epochal_version": VERSION,
        "master_id": settings.cluster_id,
        "cluster_id": settings.cluster_id,
        "cluster_name": settings.cluster_name,
        "telemetry": {"enabled": False},
    }
