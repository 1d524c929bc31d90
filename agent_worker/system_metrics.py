"""System metrics of a trial run, sampled by the agent (not the training code), as Determined's
profiler samples them when the config says `profiling: {enabled: true}`.

Every sample covers the run's processes (CPU, resident memory, disk reads and writes), the
host's network, and each GPU of the run's slots (utilization and memory, through NVML). Rates
are over the time since the previous sample. The samples are stored as the trial's metric group
`system`, keyed by the sample's time in milliseconds since the epoch (not a batch count).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType

import httpx
import psutil

from agent_worker.runtime import Launch
from agent_worker.slots import TYPE_CUDA, Slot, load_nvml
from common.metric_groups import SYSTEM
from wire.workflow_io import RunTrialInput

logger = logging.getLogger(__name__)


@dataclass
class _Totals:
    """Counters at one moment: CPU seconds and I/O bytes by pid, the host's network bytes."""

    at: float
    cpu: dict[int, float] = field(default_factory=dict)
    read: dict[int, int] = field(default_factory=dict)
    written: dict[int, int] = field(default_factory=dict)
    net_recv: int = 0
    net_sent: int = 0


class SystemSampler:
    """Samples one run: `pids()` names its processes (the runtime's root process; the sampler
    adds its descendants), `slots` its GPUs. Not thread-safe; one per run."""

    def __init__(self, pids: Callable[[], list[int]], slots: list[Slot], *,
                 nvml: ModuleType | None = None, clock: Callable[[], float] = time.monotonic):
        self._pids = pids
        self._clock = clock
        self._gpus = [s for s in slots if s.type == TYPE_CUDA and s.uuid]
        self._nvml = (nvml or load_nvml()) if self._gpus else None
        self._handles: dict[int, object] = {}
        self._nvml_ready = False
        self._last: _Totals | None = None

    def sample(self) -> dict[str, float]:
        """One sample; rates are 0 on the first."""
        now = self._totals()
        last, self._last = self._last, now
        metrics: dict[str, float] = {"cpu_util_percent": 0.0,
                                     "memory_rss_bytes": float(self._rss())}
        elapsed = now.at - last.at if last is not None else 0.0
        if last is not None and elapsed > 0:
            metrics["cpu_util_percent"] = 100.0 * _gain(now.cpu, last.cpu) / elapsed
            metrics["disk_read_bytes_per_s"] = _gain(now.read, last.read) / elapsed
            metrics["disk_write_bytes_per_s"] = _gain(now.written, last.written) / elapsed
            metrics["host_net_recv_bytes_per_s"] = max(0, now.net_recv - last.net_recv) / elapsed
            metrics["host_net_sent_bytes_per_s"] = max(0, now.net_sent - last.net_sent) / elapsed
        else:
            for name in ("disk_read_bytes_per_s", "disk_write_bytes_per_s",
                         "host_net_recv_bytes_per_s", "host_net_sent_bytes_per_s"):
                metrics[name] = 0.0
        metrics.update(self._gpu_metrics())
        return metrics

    def close(self) -> None:
        if self._nvml_ready and self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._nvml_ready = False

    def _processes(self) -> list[psutil.Process]:
        found: dict[int, psutil.Process] = {}
        for pid in self._pids():
            with contextlib.suppress(psutil.Error):
                root = psutil.Process(pid)
                found[root.pid] = root
                for child in root.children(recursive=True):
                    found[child.pid] = child
        return list(found.values())

    def _totals(self) -> _Totals:
        totals = _Totals(at=self._clock())
        for proc in self._processes():
            with contextlib.suppress(psutil.Error):
                times = proc.cpu_times()
                totals.cpu[proc.pid] = times.user + times.system
            with contextlib.suppress(psutil.Error, AttributeError):
                io = proc.io_counters()
                totals.read[proc.pid], totals.written[proc.pid] = io.read_bytes, io.write_bytes
        with contextlib.suppress(OSError, AttributeError):
            net = psutil.net_io_counters()
            totals.net_recv, totals.net_sent = net.bytes_recv, net.bytes_sent
        return totals

    def _rss(self) -> int:
        total = 0
        for proc in self._processes():
            with contextlib.suppress(psutil.Error):
                total += proc.memory_info().rss
        return total

    def _gpu_metrics(self) -> dict[str, float]:
        """`gpu<slot>_util_percent` and `gpu<slot>_memory_used_bytes` for each of the run's
        GPUs; nothing when NVML cannot be read (the rest of the sample still counts)."""
        nvml = self._nvml
        if nvml is None or not self._gpus:
            return {}
        try:
            if not self._nvml_ready:
                nvml.nvmlInit()
                self._nvml_ready = True
            metrics: dict[str, float] = {}
            for slot in self._gpus:
                handle = self._handles.get(slot.id)
                if handle is None:
                    handle = self._handles[slot.id] = nvml.nvmlDeviceGetHandleByUUID(slot.uuid)
                metrics[f"gpu{slot.id}_util_percent"] = float(
                    nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                metrics[f"gpu{slot.id}_memory_used_bytes"] = float(
                    nvml.nvmlDeviceGetMemoryInfo(handle).used)
            return metrics
        except Exception as err:  # NVMLError_GpuIsLost, ...
            logger.warning("cannot read GPU metrics through NVML: %s", err)
            return {}


def _gain(now: dict[int, float] | dict[int, int], before: dict[int, float] | dict[int, int]
          ) -> float:
    """What the processes alive in both samples added (a new one counts from zero)."""
    return float(sum(max(0.0, value - before.get(pid, 0)) for pid, value in now.items()))


async def report_system_metrics(http: httpx.AsyncClient, master_url: str, launch: Launch,
                                slots: list[Slot], interval: float) -> None:
    """Sample the run every `interval` seconds and store each sample, until cancelled.

    Sent with the run's own token, so a sample of a run that is over is refused. A sample the
    master does not take is dropped (the next one follows): they are a view, not a record."""
    inp = launch.input
    if not isinstance(inp, RunTrialInput):
        return  # an interactive task's samples have no trial to be stored under
    sampler = SystemSampler(lambda: [launch.root_pid] if launch.root_pid else [], slots)
    headers = {"Authorization": f"Bearer {inp.session_token}"} if inp.session_token else {}
    try:
        await asyncio.to_thread(sampler.sample)  # the baseline the first rates count from
        while True:
            await asyncio.sleep(interval)
            metrics = await asyncio.to_thread(sampler.sample)
            body = {"group": SYSTEM, "metrics": {
                "trialId": inp.trial_id, "trialRunId": inp.run_id,
                "stepsCompleted": int(time.time() * 1000),
                "metrics": {"avgMetrics": metrics}}}
            try:
                answer = await http.post(f"{master_url}/api/v1/trials/{inp.trial_id}/metrics",
                                         json=body, headers=headers)
                if answer.status_code >= 400:
                    logger.debug("system metrics of trial %s refused: %s %s", inp.trial_id,
                                 answer.status_code, answer.text[:200])
            except httpx.HTTPError as err:
                logger.debug("system metrics of trial %s not sent: %s", inp.trial_id, err)
    finally:
        sampler.close()
