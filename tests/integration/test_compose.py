"""deploy/compose: the docker-compose file is valid for Compose (`docker-compose config`), wires
the parts together as the master and agents read their settings, and its image's recipe copies
every package the project installs. (Its images are not pulled or built here: this machine
reaches no container registry.)"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from api.settings import parse_storage
from deploy.debian_packages import in_ci

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "deploy" / "compose"


def compose_command() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    plugin = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False
                            ) if shutil.which("docker") else None
    if plugin is not None and plugin.returncode == 0:
        return ["docker", "compose"]
    if in_ci():  # `make test` installs it (deploy/dockerd.py)
        pytest.fail("neither docker-compose nor `docker compose` is installed")
    pytest.skip("neither docker-compose nor `docker compose` is installed")


def resolved(*profiles: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    argv = [*compose_command(), "--env-file", str(COMPOSE / ".env.example"),
            "-f", str(COMPOSE / "docker-compose.yml")]
    for profile in profiles:
        argv += ["--profile", profile]
    return subprocess.run([*argv, "config"], capture_output=True, text=True, timeout=60,
                          cwd=COMPOSE, env={**os.environ, **(env or {})}, check=False)


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    result = resolved("gpu")
    assert result.returncode == 0, result.stderr
    return dict(yaml.safe_load(result.stdout))


def test_the_cluster_is_wired_as_its_parts_read_their_settings(config: dict[str, Any]) -> None:
    services = config["services"]
    assert set(services) == {"postgres", "temporal", "temporal-ui", "seaweedfs", "master",
                             "agent", "agent-gpu"}
    master = services["master"]["environment"]
    storage = parse_storage(master["EPOCHAL_CHECKPOINT_STORAGE"])
    assert storage == {"type": "s3", "bucket": "checkpoints",
                       "endpoint_url": "http://seaweedfs:8333",
                       "access_key": "EPOCHALCHANGEME", "secret_key": "change-me-s3-secret-key"}
    assert master["EPOCHAL_DB_URL"] == (
        "postgresql://postgres:change-me-postgres@postgres:5432/epochal")
    assert master["EPOCHAL_TEMPORAL_ADDRESS"] == "temporal:7233"
    for name in ("agent", "agent-gpu"):
        agent = services[name]
        command = agent["command"]
        assert command[command.index("--master") + 1] == "http://master:8080"
        assert command[command.index("--temporal") + 1] == "temporal:7233"
        assert agent["environment"]["EPOCHAL_CLUSTER_TOKEN"] == (
            master["EPOCHAL_CLUSTER_TOKEN"])
        assert "EPOCHAL_DB_URL" not in agent["environment"]  # agents never see the database
    [gpus] = services["agent-gpu"]["deploy"]["resources"]["reservations"]["devices"]
    assert gpus["driver"] == "nvidia" and gpus["capabilities"] == ["gpu"]


def test_a_missing_secret_is_named() -> None:
    result = resolved(env={"POSTGRES_PASSWORD": ""})
    assert result.returncode != 0
    assert "POSTGRES_PASSWORD" in result.stderr and "set it in .env" in result.stderr


def test_the_image_recipe_copies_every_package_the_project_installs() -> None:
    dockerfile = (COMPOSE / "Dockerfile").read_text()
    copied = set(re.findall(r"^COPY (\S+) \./", dockerfile, re.MULTILINE))
    for source in copied:
        assert (REPO / source).exists(), f"Dockerfile copies {source}, which does not exist"
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages <= copied, f"the image lacks {sorted(packages - copied)}"
    assert {"pyproject.toml", "README.md"} <= {
        name for line in re.findall(r"^COPY (.+) \./$", dockerfile, re.MULTILINE)
        for name in line.split()}
