"""The local S3 server (deploy/s3_server.py) on a small disk: SeaweedFS gives every bucket volumes
of its own, and a new bucket must still be writable when the disk has little room left."""

from __future__ import annotations

import io
import os
import subprocess

import pytest

from common.processes import free_port_block
from deploy.s3_server import PORT_BLOCK, SeaweedFSServer
from tests.conftest import scratch_dir
from tests.s3_fixtures import ACCESS_KEY, SECRET_KEY, S3Server


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small disk (tmpfs) needs root")
def test_new_buckets_are_writable_on_a_disk_with_room_for_few_volumes() -> None:
    # 768 MiB holds three of its 256 MiB volumes: when the volume cap followed the free space,
    # the third bucket (`first`, then two of these) got none, and every write to it failed.
    with scratch_dir("epochal-test-small-disk-") as root:
        disk = root / "disk"
        disk.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=768m", "tmpfs", str(disk)],
                       check=True)
        server = SeaweedFSServer(disk / "data", log_file=root / "s3.log",
                                 pid_file=root / "s3.pid")
        try:
            endpoint = server.start(free_port_block(PORT_BLOCK), access_key=ACCESS_KEY,
                                    secret_key=SECRET_KEY, bucket="first")
            client = S3Server(endpoint).client
            buckets = [f"bucket-{i}" for i in range(6)]
            for name in buckets:
                client.make_bucket(name)
                client.put_object(name, "checkpoint/state", io.BytesIO(name.encode()), len(name))
            assert [client.get_object(name, "checkpoint/state").read().decode()
                    for name in buckets] == buckets
        finally:
            server.stop()
            # Lazily: SeaweedFS's process counts as stopped once its main thread has exited,
            # and its other threads may hold the disk a moment longer.
            subprocess.run(["umount", "--lazy", str(disk)], check=True)
