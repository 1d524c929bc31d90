"""Messages of the provisioner (workflows/provisioner.py) and its activities
(activities/provisioning.py). Plain dataclasses: they travel through Temporal as JSON."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Limits:
    """A pool's provisioning limits (Determined's provider settings), read each round, so a
    changed master config applies without restarting the workflow."""

    min_instances: int = 0
    max_instances: int = 5
    max_idle_agent_period: float = 1200.0  # seconds
    max_agent_starting_period: float = 1200.0  # seconds
    slots_per_instance: int = 1
    interval: float = 10.0  # seconds between rounds


@dataclass
class Instance:
    """A machine (process, container, VM) the provider started for the pool, running the agent
    `agent_id`; `launched_at` in seconds since the epoch."""

    instance_id: str
    agent_id: str
    launched_at: float


@dataclass
class AgentView:
    agent_id: str
    alive: bool
    enabled: bool
    busy: bool  # holds at least one allocation


@dataclass
class Observation:
    limits: Limits
    instances: list[Instance]
    agents: list[AgentView]
    queued_slots: list[int]  # the slots each queued request asks for


@dataclass
class ProvisionerMemory:
    """What the workflow remembers between rounds (and carries over continue-as-new)."""

    idle_since: dict[str, float] = field(default_factory=dict)  # agent id -> seconds
    retiring: list[str] = field(default_factory=list)  # agent ids disabled to be retired
    launched: int = 0
    terminated: int = 0


@dataclass
class ProvisionerInput:
    pool: str
    memory: ProvisionerMemory | None = None


@dataclass
class LaunchRequest:
    pool: str
    count: int


@dataclass
class TerminateRequest:
    pool: str
    instance_ids: list[str]
    reason: str


@dataclass
class EnableRequest:
    pool: str
    agent_ids: list[str]
    enabled: bool
