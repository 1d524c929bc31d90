"""The agent's system metrics of a run: real processes for CPU, memory and disk, a fake NVML
for the GPUs (no NVIDIA GPU here)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from agent_worker.slots import discover_slots
from agent_worker.system_metrics import SystemSampler
from tests.unit.test_scheduler_parts import fake_nvml

# A parent that starts a child which holds 64 MiB, writes 8 MiB to disk and keeps a CPU busy.
BUSY = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", '''
import os, sys, time
block = bytearray(os.urandom(64 << 20))
with open(sys.argv[1], "wb") as f:
    f.write(os.urandom(8 << 20)); f.flush(); os.fsync(f.fileno())
print("ready", flush=True)
end = time.monotonic() + 30
while time.monotonic() < end:
    sum(range(10000))
''', sys.argv[1]], stdout=sys.stdout)
child.wait()
"""


def test_a_run_is_sampled_with_its_children(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", BUSY, str(tmp_path / "out.bin")],
                            stdout=subprocess.PIPE, text=True)
    try:
        sampler = SystemSampler(lambda: [proc.pid], [])
        first = sampler.sample()
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(1.0)
        second = sampler.sample()
    finally:
        proc.kill()
        proc.wait()
    assert first["cpu_util_percent"] == 0.0  # no rate before a second sample
    assert second["cpu_util_percent"] > 30  # the busy grandchild counts
    assert second["memory_rss_bytes"] > 64 << 20
    assert second["disk_write_bytes_per_s"] > 1 << 20
    assert second["host_net_recv_bytes_per_s"] >= 0
    assert not any(name.startswith("gpu") for name in second)


def test_gpu_figures_of_the_runs_slots_only() -> None:
    gpus = [(f"GPU-{i}", b"Fake A100", 80 << 30) for i in range(4)]
    nvml = fake_nvml(gpus)
    slots = [s for s in discover_slots(nvml=nvml) if s.id in (1, 3)]
    sampler = SystemSampler(lambda: [], slots, nvml=nvml)
    sample = sampler.sample()
    sampler.close()
    assert {k: v for k, v in sample.items() if k.startswith("gpu")} == {
        "gpu1_util_percent": 20.0, "gpu1_memory_used_bytes": float(20 << 30),
        "gpu3_util_percent": 40.0, "gpu3_memory_used_bytes": float(20 << 30)}
    assert nvml.calls[-2:] == ["init", "shutdown"]


def test_a_gone_process_and_a_broken_nvml_still_give_a_sample() -> None:
    gpus = [("GPU-0", b"Fake A100", 80 << 30)]
    broken = fake_nvml(gpus)
    broken.nvmlDeviceGetUtilizationRates = lambda h: (_ for _ in ()).throw(
        RuntimeError("GPU is lost"))
    sampler = SystemSampler(lambda: [2 ** 22 + 12345], discover_slots(nvml=fake_nvml(gpus)),
                            nvml=broken)
    sample = sampler.sample()
    assert sample["memory_rss_bytes"] == 0.0 and "gpu0_util_percent" not in sample
