"""A cluster on an external Temporal that authenticates its clients (mTLS, as self-hosted
production clusters and Temporal Cloud do): the master and the agent connect with the client
certificate EPOCHAL_TEMPORAL_TLS_* names, and an experiment runs to completion."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, shared_servers_cluster
from tests.e2e.test_faults import create, slow_config, wait_done
from tests.tls_proxy import Certificates, TlsProxy

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(postgres_url: str, temporal_address: str, tls_temporal: TlsProxy,
            certs: Certificates) -> Iterator[Cluster]:
    # The namespace is cleared through the plain address; everything after goes through TLS.
    with shared_servers_cluster(
        postgres_url, temporal_address, "tls", "--slots", "1",
        env_extra={"EPOCHAL_TEMPORAL_ADDRESS": tls_temporal.address, **certs.client_env()},
    ) as c:
        yield c


def test_master_and_agent_reach_temporal_with_their_client_certificate(
    cluster: Cluster, tls_temporal: TlsProxy, tmp_path: Path
) -> None:
    status = cluster.json("cluster", "status")
    temporal = next(p for p in status["parts"] if p["name"] == "temporal")
    assert temporal["address"] == tls_temporal.address and temporal["answering"], status
    experiment_id = create(cluster, slow_config(tmp_path, "tls", steps=5, sleep=0.05))
    assert wait_done(cluster, experiment_id) == "STATE_COMPLETED"
    log = (cluster.state_dir / "logs" / "agent.log").read_text()
    assert "cannot connect to Temporal" not in log
