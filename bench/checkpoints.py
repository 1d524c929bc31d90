"""S3 checkpoints: upload and download throughput of the harness against the local S3 server.

Starts a local cluster with `--s3` (SeaweedFS as the default checkpoint storage, in a temporary
state dir, free ports) and submits a trial that stores one checkpoint of `--many-mb` MiB in
`--files` files plus one file of `--large-mb` MiB (random bytes), then drops its cached copy and
restores it: the trial times `store_path`'s upload (the block's end to the checkpoint reported,
through the master's presigned URLs) and `restore_path`'s download, and prints them.

Beside them, in this process and on the same bytes and server, the floor: one `minio`
`fput_object` per file (upload) and one `fget_object` per file (download), and a copy on the
local disk (`shutil.copytree`).

    .venv/bin/python bench/checkpoints.py [--files 256] [--many-mb 512] [--large-mb 512]
        [--runs 3] [--poll 0.5] [--smoke]

Prints each run, then the medians; the last line is the one-line summary (MiB/s, and the
harness's share of the floor).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import httpx
import yaml
from minio import Minio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common.cluster import bench_cluster  # noqa: E402
from bench.common.login import admin_headers  # noqa: E402
from bench.common.smoke import add_smoke_option, parse_args  # noqa: E402
from cli.model_dir import package  # noqa: E402
from common.checkpoint_storage import PART_SIZE  # noqa: E402
from common.processes import free_port_block  # noqa: E402
from deploy import local_cluster  # noqa: E402
from deploy.s3_server import PORT_BLOCK  # noqa: E402

MIB = 1024 * 1024
TERMINAL = ("STATE_COMPLETED", "STATE_ERROR", "STATE_CANCELED")
FIGURES = re.compile(r"BENCH upload ([\d.]+) s, download ([\d.]+) s, (\d+) bytes")

# The trial: writes the checkpoint, times its upload, drops the cached copy, times the restore.
TRAIN = textwrap.dedent('''
    import os, shutil, time
    import harness.core

    def write(path, files, many_mb, large_mb):
        size = many_mb * 1024 * 1024 // files
        for i in range(files):
            (path / "shards" / f"{i // 64:03d}").mkdir(parents=True, exist_ok=True)
            (path / "shards" / f"{i // 64:03d}" / f"{i:05d}.bin").write_bytes(os.urandom(size))
        with open(path / "model.bin", "wb") as f:
            for _ in range(large_mb):
                f.write(os.urandom(1024 * 1024))

    with harness.core.init() as core:
        hp = core.info.hparams
        with core.checkpoint.store_path({"steps_completed": 1}) as (path, storage_id):
            write(path, hp["files"], hp["many_mb"], hp["large_mb"])
            started = time.monotonic()
        uploaded = time.monotonic() - started
        cached = core.checkpoint.base_path / storage_id
        total = sum(p.stat().st_size for p in cached.rglob("*") if p.is_file())
        shutil.rmtree(cached)
        started = time.monotonic()
        with core.checkpoint.restore_path(storage_id) as path:
            downloaded = time.monotonic() - started
        print(f"BENCH upload {uploaded:.3f} s, download {downloaded:.3f} s, {total} bytes",
              flush=True)
''')


def config(files: int, many_mb: int, large_mb: int, run: str) -> str:
    return yaml.safe_dump({
        "name": f"bench-checkpoints-{run}", "entrypoint": "python3 train.py",
        "hyperparameters": {"files": files, "many_mb": many_mb, "large_mb": large_mb},
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
        "max_restarts": 0})


def trial_figures(api: httpx.Client, model: list[dict[str, object]], files: int, many_mb: int,
                  large_mb: int, run: str, poll: float = 0.5) -> tuple[float, float, int]:
    """(upload s, download s, bytes) the trial measured."""
    answer = api.post("/api/v1/experiments", json={
        "config": config(files, many_mb, large_mb, run), "modelDefinition": model})
    answer.raise_for_status()
    experiment_id = answer.json()["experiment"]["id"]
    deadline = time.monotonic() + 900
    while (state := api.get(f"/api/v1/experiments/{experiment_id}").json()["experiment"][
            "state"]) not in TERMINAL:
        if time.monotonic() > deadline:
            raise SystemExit(f"experiment {experiment_id} did not end in 900 s")
        time.sleep(poll)
    trial = api.get(f"/api/v1/experiments/{experiment_id}/trials").json()["trials"][0]
    lines = [yaml.safe_load(line)["result"]["log"] for line in
             api.get(f"/api/v1/trials/{trial['id']}/logs").text.splitlines() if line.strip()]
    found = [m for line in lines if (m := FIGURES.search(line))]
    if state != "STATE_COMPLETED" or not found:
        raise SystemExit(f"experiment {experiment_id} ended {state}:\n" + "\n".join(lines[-30:]))
    return float(found[0].group(1)), float(found[0].group(2)), int(found[0].group(3))


def write_same_layout(root: Path, files: int, many_mb: int, large_mb: int) -> int:
    size = many_mb * MIB // files
    for i in range(files):
        (root / "shards" / f"{i // 64:03d}").mkdir(parents=True, exist_ok=True)
        (root / "shards" / f"{i // 64:03d}" / f"{i:05d}.bin").write_bytes(os.urandom(size))
    with open(root / "model.bin", "wb") as f:
        for _ in range(large_mb):
            f.write(os.urandom(MIB))
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def floor_figures(client: Minio, bucket: str, root: Path, run: str) -> tuple[float, float, float]:
    """(fput_object s, fget_object s, local copy s) of the files under `root`."""
    names = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    started = time.monotonic()
    for name in names:
        client.fput_object(bucket, f"floor-{run}/{name}", str(root / name))
    put = time.monotonic() - started
    with tempfile.TemporaryDirectory(prefix="epochal-bench-get-") as target:
        started = time.monotonic()
        for name in names:
            client.fget_object(bucket, f"floor-{run}/{name}", os.path.join(target, name))
        get = time.monotonic() - started
    with tempfile.TemporaryDirectory(prefix="epochal-bench-copy-") as target:
        started = time.monotonic()
        shutil.copytree(root, Path(target) / "copy")
        copy = time.monotonic() - started
    return put, get, copy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=256, help="files of the 'many' part")
    parser.add_argument("--many-mb", type=int, default=512, help="MiB over those files")
    parser.add_argument("--large-mb", type=int, default=512, help="MiB of the one large file")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--poll", type=float, default=0.5,
                        help="seconds between looks at whether the trial has ended")
    # The large file just over one part, so that it still goes up as a multipart upload.
    add_smoke_option(parser, files=2, many_mb=1, large_mb=PART_SIZE // MIB + 1, runs=1,
                     poll=0.1)
    args = parse_args(parser)
    if args.files < 1 or args.many_mb < 1 or args.large_mb < 1:
        parser.error("--files, --many-mb and --large-mb must be at least 1")
    with tempfile.TemporaryDirectory(prefix="epochal-bench-model-") as model_dir:
        (Path(model_dir) / "train.py").write_text(TRAIN)
        model = package(Path(model_dir))
    with bench_cluster(agent_slots=1, s3=True, s3_port=free_port_block(PORT_BLOCK)) as (
            _settings, info), tempfile.TemporaryDirectory(prefix="epochal-bench-data-") as data:
        assert info.s3_endpoint is not None
        client = Minio(info.s3_endpoint.removeprefix("http://"), access_key=info.s3_access_key,
                       secret_key=info.s3_secret_key, secure=False)
        size = write_same_layout(Path(data), args.files, args.many_mb, args.large_mb)
        rows = []
        with httpx.Client(base_url=info.api_url, timeout=60,
                          headers=admin_headers(info.api_url, info.admin_password)) as api:
            for run in range(1, args.runs + 1):
                up, down, stored = trial_figures(api, model, args.files, args.many_mb,
                                                 args.large_mb, str(run), args.poll)
                put, get, copy = floor_figures(client, local_cluster.S3_BUCKET, Path(data),
                                               str(run))
                mib, floor_mib = stored / MIB, size / MIB
                row = (mib / up, mib / down, floor_mib / put, floor_mib / get, floor_mib / copy)
                rows.append(row)
                print(f"run {run}: {mib:.0f} MiB in {args.files + 2} files: harness upload "
                      f"{row[0]:.0f} MiB/s, download {row[1]:.0f} MiB/s; minio fput_object "
                      f"{row[2]:.0f} MiB/s, fget_object {row[3]:.0f} MiB/s; local copy "
                      f"{row[4]:.0f} MiB/s", flush=True)
    median = [statistics.median(r[k] for r in rows) for k in range(5)]
    print(f"medians of {args.runs} run(s): harness upload {median[0]:.0f} MiB/s "
          f"({median[0] / median[2]:.0%} of fput_object), download {median[1]:.0f} MiB/s "
          f"({median[1] / median[3]:.0%} of fget_object), local copy {median[4]:.0f} MiB/s")
    print(f"checkpoints: upload {median[0]:.0f} MiB/s = {median[0] / median[2]:.2f}x floor, "
          f"download {median[1]:.0f} MiB/s = {median[1] / median[3]:.2f}x floor, "
          f"local copy {median[4]:.0f} MiB/s")


if __name__ == "__main__":
    main()
