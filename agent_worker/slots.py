"""The agent's slots: what it offers its resource pool, and which of them each run uses.

Only CPU slots for now; GPU discovery (pynvml, ``TYPE_CUDA``) slots in next to
``cpu_slots`` in ``discover_slots``.
"""

from __future__ import annotations

import logging
import os
import platform
from dataclasses import dataclass
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

    def to_api(self) -> dict[str, Any]:
        """The slot as `PUT /api/v1/agents/{agentId}` expects it."""
        return {"id": str(self.id), "type": self.type, "device": {"brand": self.brand,
                                                                  "uuid": self.uuid}}


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


def discover_slots(cpu_count: int | None = None) -> list[Slot]:
    """The slots this agent offers. `cpu_count` is `--slots`; None means one per CPU."""
    return cpu_slots(cpu_count)


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

    def acquire(self, count: int = 1) -> list[int]:
        count = max(1, min(count, len(self.slots)))
        chosen = sorted(self._users, key=lambda sid: (self._users[sid], sid))[:count]
        for sid in chosen:
            if self._users[sid]:
                logger.warning("slot %s is already in use; sharing it", sid)
            self._users[sid] += 1
        return sorted(chosen)

    def release(self, slot_ids: list[int]) -> None:
        for sid in slot_ids:
            if self._users.get(sid, 0) > 0:
                self._users[sid] -= 1

    def in_use(self) -> int:
        return sum(1 for n in self._users.values() if n)
