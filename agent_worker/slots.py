"""The agent's slots: what it offers its resource pool, and which of them each run uses.

NVIDIA GPUs are found with pynvml (one ``TYPE_CUDA`` slot per GPU, with its uuid, name and
memory); without pynvml, a driver or any GPU, the agent offers CPU slots.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
from dataclasses import dataclass
from types import ModuleType
from typing import Any

logger = logging.getLogger(__name__)

TYPE_CPU = "TYPE_CPU"
TYPE_CUDA = "TYPE_CUDA"


@dataclass(frozen=True)
class Slot:
    id: int
    type: str
    brand: str
    uuid: str | None = None
    memory_bytes: int | None = None

    def to_api(self) -> dict[str, Any]:
        """The slot as `PUT /api/v1/agents/{agentId}` expects it."""
        device: dict[str, Any] = {"brand": self.brand, "uuid": self.uuid}
        if self.memory_bytes is not None:
            device["memoryBytes"] = self.memory_bytes
        return {"id": str(self.id), "type": self.type, "device": device}


def cpu_brand() -> str:
    """The CPU's model name from /proc/cpuinfo, else whatever the platform says, else 'cpu'."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def cpu_slots(count: int | None = None) -> list[Slot]:
    """`count` CPU slots (default: one per CPU)."""
    n = count if count is not None else (os.cpu_count() or 1)
    if n < 1:
        raise ValueError(f"an agent needs at least one slot, got {n}")
    brand = cpu_brand()
    return [Slot(id=i, type=TYPE_CPU, brand=brand) for i in range(n)]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def load_nvml() -> ModuleType | None:
    try:
        import pynvml  # type: ignore[import-not-found, import-untyped, unused-ignore]
    except ImportError:
        return None
    module: ModuleType = pynvml
    return module


def gpu_slots(nvml: ModuleType | None = None) -> list[Slot]:
    """One TYPE_CUDA slot per NVIDIA GPU that NVML reports; [] without pynvml or a driver."""
    nvml = nvml or load_nvml()
    if nvml is None:
        return []
    try:
        nvml.nvmlInit()
    except Exception as err:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        logger.info("no NVIDIA GPUs (NVML: %s); offering CPU slots", err)
        return []
    try:
        found = []
        for i in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            found.append(Slot(id=i, type=TYPE_CUDA, brand=_text(nvml.nvmlDeviceGetName(handle)),
                              uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                              memory_bytes=int(memory.total)))
        return found
    except Exception as err:
        logger.warning("cannot list GPUs through NVML (%s); offering CPU slots", err)
        return []
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def discover_slots(cpu_count: int | None = None, *, nvml: ModuleType | None = None) -> list[Slot]:
    """The slots this agent offers: its GPUs, else CPU slots.

    `cpu_count` is `--slots`: with GPUs it caps how many are offered, without it is the number
    of CPU slots (None: one per CPU).
    """
    gpus = gpu_slots(nvml)
    if gpus:
        return gpus[:cpu_count] if cpu_count is not None else gpus
    return cpu_slots(cpu_count)


def gpu_environment(slots: list[Slot]) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES by UUID for a run's slots: the same GPUs, in the order of its slot
    ids, however a container numbers them; local rank N of a distributed run uses cuda:N."""
    uuids = [s.uuid for s in slots if s.type == TYPE_CUDA and s.uuid]
    if not uuids:
        return {}
    return {"CUDA_VISIBLE_DEVICES": ",".join(uuids), "NVIDIA_VISIBLE_DEVICES": ",".join(uuids)}


class SlotPool:
    """Hands each run slot ids, least-used first.

    The scheduler decides how many runs an agent gets; this only picks ids. When more runs
    than slots arrive (the pool and the agent task queue are polled separately), slots are
    shared rather than the run refused.
    """

    def __init__(self, slots: list[Slot]) -> None:
        if not slots:
            raise ValueError("a slot pool needs at least one slot")
        self.slots = list(slots)
        self._users: dict[int, int] = {s.id: 0 for s in slots}

    def of(self, slot_ids: list[int]) -> list[Slot]:
        """The slots with these ids, in that order."""
        by_id = {s.id: s for s in self.slots}
        return [by_id[sid] for sid in slot_ids if sid in by_id]

    def acquire(self, count: int = 1) -> list[int]:
        count = max(1, min(count, len(self.slots)))
        chosen = sorted(self._users, key=lambda sid: (self._users[sid], sid))[:count]
        for sid in chosen:
            if self._users[sid]:
                logger.warning("slot %s is already in use; sharing it", sid)
            self._users[sid] += 1
        return sorted(chosen)

    def claim(self, slot_ids: list[int]) -> list[int]:
        """Mark the slots the scheduler granted as used (ids this agent does not have: ignored)."""
        chosen = sorted(sid for sid in set(slot_ids) if sid in self._users)
        for sid in chosen:
            if self._users[sid]:
                logger.warning("slot %s is already in use; sharing it", sid)
            self._users[sid] += 1
        return chosen

    def release(self, slot_ids: list[int]) -> None:
        for sid in slot_ids:
            if self._users.get(sid, 0) > 0:
                self._users[sid] -= 1

    def in_use(self) -> int:
        return sum(1 for n in self._users.values() if n)
