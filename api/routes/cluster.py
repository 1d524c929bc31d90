"""The cluster: master info and health (agents are in api/routes/agents.py)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from api.deps import AppSettings, Pool

router = APIRouter(tags=["cluster"])

VERSION = "0.1.0"


@router.get("/health")
async def health(pool: Pool) -> dict[str, bool]:
    await pool.fetchval("SELECT 1")
    return {"ok": True}


@router.get("/api/v1/master")
async def master_info(settings: AppSettings) -> dict[str, Any]:
    return {
        "version": VERSION,
        "masterId": settings.cluster_id,
        "clusterId": settings.cluster_id,
        "clusterName": settings.cluster_name,
        "telemetryEnabled": False,
    }
