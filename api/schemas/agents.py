"""Agents and their slots, with what the pools' schedulers run on them."""

from __future__ import annotations

from api.schemas import Answer


class Device(Answer):
    """Determined's v1Device."""

    id: int
    type: str
    brand: str | None = None
    uuid: str | None = None
    memoryBytes: int | None = None


class Container(Answer):
    """Determined's v1Container: a running allocation on the agent."""

    id: str
    state: str
    devices: list[Device]
    parent: str
    permissionDenied: bool


class AgentSlot(Answer):
    """Determined's v1Slot, with the allocation, trial and experiment holding it."""

    id: str
    type: str
    device: Device
    enabled: bool
    draining: bool
    container: Container | None
    allocationId: str | None
    trialId: int | None  # a trial's slot; None for an interactive task's
    experimentId: int | None
    taskId: str | None  # what holds it: a trial (`<experiment>.<trial>`) or a task
    taskType: str | None  # TASK_TYPE_TRIAL, TASK_TYPE_NOTEBOOK, ...
    taskName: str | None  # as `det slot list` shows it: "Trial 5 (Experiment 3)", a description
    disabledReason: str | None = None  # Epochal's: why an admin disabled it (`det slot disable`)


class DeviceStats(Answer):
    """Determined's v1DeviceStats."""

    total: int
    disabled: int
    draining: int
    states: dict[str, int]


class SlotStats(Answer):
    """Determined's v1SlotStats."""

    typeStats: dict[str, DeviceStats]
    brandStats: dict[str, DeviceStats]


class Agent(Answer):
    """Determined's v1Agent, plus Epochal's lastSeen, alive and usedSlots."""

    id: str
    resourcePool: str
    slots: dict[str, AgentSlot]
    registeredTime: str
    lastSeen: str
    enabled: bool
    alive: bool
    version: str | None
    usedSlots: int
    resourcePools: list[str]
    draining: bool
    addresses: list[str]
    containers: dict[str, Container]
    slotStats: SlotStats


class AgentList(Answer):
    """Determined's v1GetAgentsResponse."""

    agents: list[Agent]


class AgentAnswer(Answer):
    """Determined's v1GetAgentResponse."""

    agent: Agent


class SlotList(Answer):
    """Determined's v1GetSlotsResponse."""

    slots: list[AgentSlot]


class SlotChanged(Answer):
    """Determined's v1EnableSlotResponse and v1DisableSlotResponse."""

    slot: AgentSlot


class PeerRunPort(Answer):
    """A port a run of another agent listens on, at one address of that agent's host."""

    address: str
    port: int
    uid: int


class AgentRegistered(Answer):
    """The answer to an agent's registration: what it closes to other users' runs on its host
    (agent_worker/trial_firewall.py)."""

    runPorts: list[PeerRunPort]
