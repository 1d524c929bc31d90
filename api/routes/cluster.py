"""The cluster: master info, health, and agents (registration and listing)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from api.deps import AppSettings, Pool
from api.views import rfc3339

router = APIRouter(tags=["cluster"])

AGENT_ALIVE_SECONDS = 15
VERSION = "0.1.0"


class SlotDevice(BaseModel):
    brand: str | None = None
    uuid: str | None = None


class Slot(BaseModel):
    id: str
    type: str = "TYPE_CPU"
    device: SlotDevice = Field(default_factory=SlotDevice)


class RegisterAgentRequest(BaseModel):
    resourcePool: str = "default"
    slots: list[Slot] = Field(default_factory=list)
    version: str | None = None


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


@router.put("/api/v1/agents/{agent_id}")
async def register_agent(agent_id: str, body: RegisterAgentRequest, pool: Pool) -> dict[str, Any]:
    await pool.execute(
        "INSERT INTO agents (id, resource_pool, slots, version) VALUES ($1, $2, $3, $4)"
        " ON CONFLICT (id) DO UPDATE SET resource_pool = EXCLUDED.resource_pool,"
        "   slots = EXCLUDED.slots, version = EXCLUDED.version, last_seen = now()",
        agent_id,
        body.resourcePool,
        [s.model_dump() for s in body.slots],
        body.version,
    )
    return {}


@router.get("/api/v1/agents")
async def list_agents(pool: Pool) -> dict[str, Any]:
    rows = await pool.fetch(
        "SELECT *, last_seen > now() - make_interval(secs => $1) AS alive FROM agents ORDER BY id",
        AGENT_ALIVE_SECONDS,
    )
    return {
        "agents": [
            {
                "id": r["id"],
                "resourcePool": r["resource_pool"],
                "slots": {s["id"]: s for s in r["slots"]},
                "registeredTime": rfc3339(r["registered_at"]),
                "lastSeen": rfc3339(r["last_seen"]),
                "enabled": r["enabled"],
                "alive": r["alive"],
                "version": r["version"],
            }
            for r in rows
        ]
    }
