"""The scheduler's small parts: GPU discovery through a fake NVML (there is no GPU here),
slot claims, pool names from the environment, a trial's resources, the liveness activity."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from agent_worker.liveness import Liveness
from agent_worker.slots import TYPE_CPU, TYPE_CUDA, SlotPool, cpu_slots, discover_slots
from api.settings import parse_pools
from common.expconf import ResourcesConfig
from wire.pools import AgentLivenessInput
from workflows.allocation import Resources


class FakeNVMLError(Exception):
    pass


def fake_nvml(gpus: list[tuple[str, bytes, int]], *, broken: bool = False) -> Any:
    """A stand-in for the pynvml module with `gpus` as (uuid, name, memory bytes)."""
    calls: list[str] = []

    def init() -> None:
        calls.append("init")
        if broken:
            raise FakeNVMLError("NVML Shared Library Not Found")

    return SimpleNamespace(
        calls=calls,
        nvmlInit=init,
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetCount=lambda: len(gpus),
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUUID=lambda h: gpus[h][0],
        nvmlDeviceGetName=lambda h: gpus[h][1],
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(total=gpus[h][2],
                                                           used=gpus[h][2] // 4, free=0),
        nvmlDeviceGetHandleByUUID=lambda uuid: [g[0] for g in gpus].index(uuid),
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=10 * (h + 1), memory=0),
    )


def test_gpus_found_by_nvml_become_cuda_slots() -> None:
    nvml = fake_nvml([("GPU-aaa", b"NVIDIA A100-SXM4-40GB", 40 << 30),
                      ("GPU-bbb", b"NVIDIA A100-SXM4-40GB", 40 << 30)])
    slots = discover_slots(None, nvml=nvml)
    assert [(s.id, s.type, s.uuid) for s in slots] == [(0, TYPE_CUDA, "GPU-aaa"),
                                                       (1, TYPE_CUDA, "GPU-bbb")]
    assert slots[0].to_api()["device"] == {"brand": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-aaa",
                                           "memoryBytes": 40 << 30}
    assert nvml.calls == ["init", "shutdown"]
    assert len(discover_slots(1, nvml=nvml)) == 1  # --slots caps the GPUs offered


def test_without_nvml_or_gpus_the_agent_offers_cpu_slots() -> None:
    broken = discover_slots(3, nvml=fake_nvml([], broken=True))
    assert [s.type for s in broken] == [TYPE_CPU] * 3
    assert [s.type for s in discover_slots(2, nvml=fake_nvml([]))] == [TYPE_CPU] * 2
    assert "memoryBytes" not in cpu_slots(1)[0].to_api()["device"]


def test_claimed_slots_are_the_ones_the_scheduler_granted() -> None:
    slots = SlotPool(cpu_slots(4))
    assert slots.claim([2, 3, 9]) == [2, 3]  # an id the agent does not have is ignored
    assert slots.acquire(1) == [0]
    assert slots.in_use() == 3
    slots.release([2, 3])
    assert slots.in_use() == 1


def test_pools_from_the_environment_always_include_default() -> None:
    assert parse_pools("") == ("default",)
    assert parse_pools("gpu, default ,cpu,gpu") == ("default", "gpu", "cpu")


def test_a_trials_resources_come_from_its_config() -> None:
    assert Resources.of(ResourcesConfig(resource_pool="gpu", slots_per_trial=4, priority=10,
                                        max_slots=8)) == Resources(
        pool="gpu", slots=4, priority=10, max_slots=8)
    assert Resources.of(ResourcesConfig()) == Resources(
        pool="default", slots=1, priority=42, max_slots=None)


async def test_liveness_heartbeats_until_cancelled() -> None:
    liveness = Liveness("a1", beat=0.01)
    env = ActivityEnvironment()
    beats: list[Any] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    task = asyncio.ensure_future(env.run(liveness.agent_liveness,
                                         AgentLivenessInput("a1", "boot", "default")))
    while len(beats) < 3:
        await asyncio.sleep(0.01)
    assert liveness.watched(within=1)
    env.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert liveness.running == 0


async def test_liveness_ends_after_its_period_so_the_pool_renews_it() -> None:
    liveness = Liveness("a1", beat=0.01, period=0.05)
    await ActivityEnvironment().run(liveness.agent_liveness,
                                    AgentLivenessInput("a1", "boot", "default"))
    assert liveness.watched(within=1) and not liveness.watched(within=0)
