"""The provisioning and scheduling parts of the master's config file (EPOCHAL_MASTER_CONFIG), in
the shape of Determined's master.yaml: `resource_pools: [{pool_name, provider: {type,
min_instances, max_instances, max_idle_agent_period, max_agent_starting_period, ...},
scheduler: {type, preemption, backfill, preempt_tasks}}]`, the cluster's default scheduler
`resource_manager: {scheduler: ...}` and `task_container_defaults: {preemption_timeout}`. Other
keys of a Determined master.yaml are read past; unknown provider keys are named in a warning.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from wire.pools import PoolPolicy
from wire.provisioning import Limits

log = logging.getLogger(__name__)

MASTER_CONFIG_ENV = "EPOCHAL_MASTER_CONFIG"
MAX_CONFIG_BYTES = 1 << 20
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s)")
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(value: object) -> float:
    """Go's durations as Determined writes them ("20m", "1h30m", "45s") or seconds, as seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        parts = _DURATION.findall(text)
        if "".join(n + u for n, u in parts) != text:
            raise ValueError(f"expected a duration such as 30s, 20m or 1h30m, got {value!r}")
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    else:
        raise ValueError(f"expected a duration such as 30s, 20m or 1h30m, got {value!r}")
    if seconds < 0:
        raise ValueError(f"expected a duration of 0 or more, got {value!r}")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]


class ProviderBase(BaseModel):
    model_config = ConfigDict(extra="allow")

    min_instances: int = Field(0, ge=0, le=10_000)
    max_instances: int = Field(5, ge=0, le=10_000)
    max_idle_agent_period: Duration = 1200.0
    max_agent_starting_period: Duration = 1200.0
    # Slots each agent offers (its --slots; GPUs are found by the agent itself).
    slots_per_instance: int = Field(1, ge=1, le=1024)
    # How often the provisioner looks at the pool.
    interval: Duration = 10.0
    # The master and Temporal as the new agents reach them (default: the master's own).
    master_url: str | None = None
    temporal_address: str | None = None

    def limits(self) -> Limits:
        return Limits(min_instances=self.min_instances, max_instances=self.max_instances,
                      max_idle_agent_period=self.max_idle_agent_period,
                      max_agent_starting_period=self.max_agent_starting_period,
                      slots_per_instance=self.slots_per_instance,
                      interval=max(0.5, self.interval))


class ProcessProvider(ProviderBase):
    """Agent processes on the master's host (tests, small sites)."""

    type: Literal["process"]
    work_dir: str | None = None  # default: STATE/provisioned
    agent_args: list[str] = Field(default_factory=list, max_length=64)


class DockerProvider(ProviderBase):
    """Agent containers on the master's Docker engine."""

    type: Literal["docker"]
    image: str = "epochal:latest"
    # How the image runs the agent; its arguments follow.
    agent_entrypoint: list[str] = Field(default_factory=lambda: ["python", "-m", "agent_worker"],
                                        min_length=1, max_length=16)
    network: str | None = None
    gpus: bool = False
    # The process runtime's sandbox and firewall need it; without, give agents --task-user root
    # or the Docker runtime.
    privileged: bool = True
    agent_args: list[str] = Field(default_factory=list, max_length=64)


class NetworkInterface(BaseModel):
    model_config = ConfigDict(extra="allow")

    subnet_id: str | None = None
    security_group_id: str | None = None
    public_ip: bool = True


class AwsProvider(ProviderBase):
    """EC2 instances (Determined's `type: aws`); the image must have Epochal installed."""

    type: Literal["aws"]
    region: str
    image_id: str
    instance_type: str = "p3.2xlarge"
    root_volume_size: int = Field(200, ge=8, le=16_384)
    tag_key: str = "managed-by"
    tag_value: str = "epochal"
    instance_name: str = "epochal-agent"
    ssh_key_name: str | None = None
    iam_instance_profile_arn: str | None = None
    network_interface: NetworkInterface = Field(default_factory=NetworkInterface)
    # Shell lines run before the agent starts (Determined's startup_script).
    startup_script: str = Field("", max_length=16_384)
    # The agent's command on the instance.
    agent_command: str = "epochal agent run"


ProviderConfig = Annotated[ProcessProvider | DockerProvider | AwsProvider,
                           Field(discriminator="type")]


class SchedulerConfig(BaseModel):
    """A pool's (or the resource manager's) `scheduler`, as Determined reads it: type `priority`
    preempts only with `preemption: true` (off by default: Determined's DefaultSchedulerConfig),
    `fair_share` always preempts and `round_robin` never does (Determined's GetPreemption);
    every type orders by priority, then fair share (docs/ARCHITECTURE.md, "Order"). Epochal's
    own: backfilling (on) and task preemption (off: interactive tasks cannot checkpoint)."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["priority", "fair_share", "round_robin"] = "priority"
    preemption: bool = False
    backfill: bool = True
    preempt_tasks: bool = False

    def preempts(self) -> bool:
        return {"fair_share": True, "round_robin": False}.get(self.type, self.preemption)


class TaskContainerDefaults(BaseModel):
    model_config = ConfigDict(extra="ignore")

    # Seconds a preempted run has to checkpoint and exit before it is killed (Determined's
    # default: an hour).
    preemption_timeout: Duration = Field(3600.0, le=7 * 86400)


class PoolConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")

    pool_name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._-]+$")
    provider: ProviderConfig | None = None
    scheduler: SchedulerConfig | None = None


class ResourceManagerConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")

    scheduler: SchedulerConfig | None = None  # every pool's that names none


class MasterConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")

    resource_manager: ResourceManagerConfig | None = None
    resource_pools: list[PoolConfig] = Field(default_factory=list, max_length=256)
    task_container_defaults: TaskContainerDefaults | None = None


class MasterConfigError(ValueError):
    pass


def _error(path: Path, err: ValidationError) -> MasterConfigError:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    message = first["msg"]
    if first["type"] == "union_tag_invalid":
        message = "type must be one of process, docker, aws (Determined's gcp is not served)"
    return MasterConfigError(f"{path}: {where}: {message}")


def load_master_config(path: str | Path | None) -> dict[str, ProviderBase]:
    """The providers of the config file at `path`, by pool; {} without a file."""
    if not path:
        return {}
    file = Path(path)
    config = _read(file)
    providers: dict[str, ProviderBase] = {}
    for pool in config.resource_pools:
        if pool.pool_name in providers:
            raise MasterConfigError(f"{file}: resource_pools: pool {pool.pool_name!r} is "
                                    "listed twice")
        if pool.provider is None:
            continue
        if pool.provider.min_instances > pool.provider.max_instances:
            raise MasterConfigError(
                f"{file}: resource_pools.{pool.pool_name}.provider: min_instances "
                f"({pool.provider.min_instances}) is more than max_instances "
                f"({pool.provider.max_instances})")
        for key in pool.provider.model_extra or {}:
            log.warning("%s: resource_pools.%s.provider.%s is not used by Epochal", file,
                        pool.pool_name, key)
        providers[pool.pool_name] = pool.provider
    return providers


@dataclass(frozen=True)
class PoolPolicies:
    """How each pool schedules, from the config file: a pool's own `scheduler`, else the
    resource manager's; None where the file says nothing (PoolPolicy's defaults, and a pool
    input as before policies existed)."""

    pools: dict[str, PoolPolicy] = field(default_factory=dict)
    default: PoolPolicy | None = None  # any other pool's

    def of(self, pool_name: str) -> PoolPolicy | None:
        return self.pools.get(pool_name, self.default)


def load_pool_policies(path: str | Path | None) -> PoolPolicies:
    """The pools' policies of the config file at `path` (none without a file): each pool's
    `scheduler`, else `resource_manager.scheduler`, with `task_container_defaults`'s
    `preemption_timeout`."""
    if not path:
        return PoolPolicies()
    config = _read(Path(path))
    defaults = config.task_container_defaults
    timeout = defaults.preemption_timeout if defaults else 3600.0

    def policy(scheduler: SchedulerConfig | None) -> PoolPolicy | None:
        if scheduler is None and defaults is None:
            return None
        scheduler = scheduler or SchedulerConfig()
        return PoolPolicy(preemption=scheduler.preempts(), backfill=scheduler.backfill,
                          preempt_tasks=scheduler.preempt_tasks,
                          preemption_timeout_seconds=timeout)

    cluster = config.resource_manager.scheduler if config.resource_manager else None
    pools = {pool.pool_name: found for pool in config.resource_pools
             if (found := policy(pool.scheduler or cluster)) is not None}
    return PoolPolicies(pools=pools, default=policy(cluster))


def _read(file: Path) -> MasterConfig:
    try:
        if file.stat().st_size > MAX_CONFIG_BYTES:
            raise MasterConfigError(f"{file}: larger than {MAX_CONFIG_BYTES} bytes")
        data: Any = yaml.safe_load(file.read_text()) or {}
    except OSError as err:
        raise MasterConfigError(f"{MASTER_CONFIG_ENV}: cannot read {file}: "
                                f"{err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise MasterConfigError(f"{file}: not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise MasterConfigError(f"{file}: expected a mapping with resource_pools")
    try:
        return MasterConfig.model_validate(data)
    except ValidationError as err:
        raise _error(file, err) from None
