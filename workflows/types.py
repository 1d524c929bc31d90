"""Inputs and results of Epochal's workflows and activities.

One dataclass per workflow or activity, so that fields can be added with defaults without breaking
running workflows. They travel through Temporal as JSON; keep them plain (no pydantic here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]


@dataclass
class ExperimentInput:
    experiment_id: int
    config: JSON  # the normalized experiment config (ExperimentConfig.model_dump(mode="json"))
    seed: int


@dataclass
class TrialInput:
    experiment_id: int
    trial_id: int
    request_id: int
    hparams: JSON
    config: JSON
    trial_seed: int
    start_paused: bool = False


@dataclass
class TrialOutcome:
    """What a finished trial reports to its experiment."""

    trial_id: int
    state: str  # COMPLETED | CANCELED | ERROR
    restarts: int = 0
    early_exit_reason: str | None = None


@dataclass
class CreateTrialInput:
    experiment_id: int
    request_id: int
    hparams: JSON
    trial_seed: int


@dataclass
class RecordExperimentStateInput:
    experiment_id: int
    state: str
    ended: bool = False


@dataclass
class RecordTrialStateInput:
    trial_id: int
    state: str
    restarts: int | None = None
    run_id: int | None = None
    ended: bool = False
    agent_id: str | None = None


@dataclass
class RequestPreemptionInput:
    trial_id: int
    preempt: bool


@dataclass
class ResumePoint:
    latest_checkpoint: str | None
    steps_completed: int
    early_exit_reason: str | None = None


@dataclass
class FinishExperimentInput:
    experiment_id: int
    state: str


@dataclass
class RunTrialInput:
    """Everything an agent needs to run one trial process (one run of a trial)."""

    experiment_id: int
    trial_id: int
    run_id: int
    hparams: JSON
    config: JSON
    trial_seed: int
    latest_checkpoint: str | None
    steps_completed: int
    master_url: str = ""  # empty: the agent uses the master URL it was started with
    session_token: str | None = None


@dataclass
class RunTrialResult:
    exit_code: int
    agent_id: str
    oom_killed: bool = False
    message: str = ""
    extra: JSON = field(default_factory=dict)
