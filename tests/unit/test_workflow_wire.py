"""What workflows send and read, against what was sent before: ExperimentWorkflow's carried
state (a dict until issue 36) read through the cluster's data converter, each master activity
as workflows call it (workflows/db_activities.py) against the activity itself, and the
harness's spelling of the terminal states."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any, get_type_hints

import pytest

from activities.experiment_store import ExperimentStore
from activities.model_sampling import SamplingActivities
from activities.scheduler import SchedulerActivities
from activities.task_store import TaskStore
from activities.workflow_messages import MessageActivities
from common.payload_codec import data_converter
from common.states import TERMINAL_STATES, ExperimentState
from harness.tensorboard import ENDED_STATES
from wire.workflow_io import ExperimentCarry, ExperimentInput
from workflows.db_activities import MASTER_ACTIVITIES

# What ExperimentWorkflow carried before it had a type (its `_carry` then): the compact form,
# and the full one with a failed sampler's error.
COMPACT = {
    "search": {"created": 12, "finished": [3, 4]},
    "state": "PAUSED",
    "paused": True,
    "stop": None,
    "pending_from": 7,
    "running": {"41": 5, "42": 6},
    "trial_of": {"5": 41, "6": 42},
    "counts": {"COMPLETED": 3, "ERROR": 1},
    "seen": {"41": 100},
}
FULL = {
    "search": None,
    "state": "STOPPING_CANCELED",
    "paused": False,
    "stop": "cancel",
    "pending": [{"request_id": 3, "hparams": {"lr": 0.1}, "target": 10, "decision": 10}],
    "running": {},
    "trial_of": {"1": 11},
    "counts": {},
    "seen": {"11": 5},
    "error": "the sampler failed",
}


@pytest.mark.parametrize("carried", [COMPACT, FULL], ids=["compact", "full"])
@pytest.mark.parametrize("token", [None, "the-cluster-token"], ids=["plain", "encrypted"])
def test_a_carry_written_as_a_dict_is_read_as_experiment_carry(
        carried: dict[str, Any], token: str | None) -> None:
    converter = data_converter(token)
    # An input as an experiment of today writes it (agent_timeout_seconds unset: None).
    before = {"experiment_id": 9, "config": {"name": "x"}, "seed": 1, "carried": carried,
              "max_history_events": 0, "agent_timeout_seconds": None}
    [payload] = asyncio.run(converter.encode([before]))
    [inp] = asyncio.run(converter.decode([payload], [ExperimentInput]))
    assert isinstance(inp, ExperimentInput) and isinstance(inp.carried, ExperimentCarry)
    carry = inp.carried
    assert carry.state == carried["state"] and isinstance(carry.state, ExperimentState)
    assert carry.running == {int(k): v for k, v in carried["running"].items()}
    assert carry.trial_of == {int(k): v for k, v in carried["trial_of"].items()}
    assert carry.seen == {int(k): v for k, v in carried["seen"].items()}
    assert carry.pending == carried.get("pending", [])
    assert carry.pending_from == carried.get("pending_from")
    assert carry.error == carried.get("error")
    # And it travels on as it came: the same keys, the same values.
    again = ExperimentInput(9, {"name": "x"}, 1, carry.to_json())
    [sent] = asyncio.run(converter.encode([again]))
    [plain] = asyncio.run(converter.decode([sent], [dict]))
    assert plain["carried"] == carried
    # Byte for byte, as Temporal's JSON converter writes either.
    [as_dict] = asyncio.run(data_converter(None).encode([before]))
    [as_carry] = asyncio.run(data_converter(None).encode([again]))
    assert as_carry.data == as_dict.data


def test_a_fresh_experiment_carries_nothing() -> None:
    converter = data_converter(None)
    [payload] = asyncio.run(converter.encode([ExperimentInput(1, {}, 2)]))
    [inp] = asyncio.run(converter.decode([payload], [ExperimentInput]))
    assert inp.carried is None
    assert ExperimentCarry().state == ExperimentState.ACTIVE


def _implementations() -> dict[str, Callable[..., Any]]:
    """Every master activity by its registered name, as deploy/master.py's worker has them."""
    found: dict[str, Callable[..., Any]] = {}
    for cls in (ExperimentStore, SchedulerActivities, MessageActivities, TaskStore,
                SamplingActivities):
        for _, fn in inspect.getmembers(cls, inspect.isfunction):
            definition = getattr(fn, "__temporal_activity_definition", None)
            if definition is not None:
                found[definition.name] = fn
    return found


@pytest.mark.parametrize("call", MASTER_ACTIVITIES, ids=[c.name for c in MASTER_ACTIVITIES])
def test_each_typed_call_matches_its_activity(call: Any) -> None:
    fn = _implementations()[call.name]
    hints = get_type_hints(fn)
    [arg] = [p for p in inspect.signature(fn).parameters if p != "self"]
    arg_type, result_type = call.types
    assert hints[arg] == arg_type
    assert hints["return"] == (type(None) if result_type is None else result_type)


def test_every_master_activity_workflows_call_is_typed() -> None:
    called = {c.name for c in MASTER_ACTIVITIES}
    assert len(called) == len(MASTER_ACTIVITIES)
    assert called <= set(_implementations())


def test_the_harness_spells_the_terminal_states_as_the_api_does() -> None:
    """The harness ships alone in the task image (no `common`): its copy must not drift."""
    assert {f"STATE_{state}" for state in TERMINAL_STATES} == ENDED_STATES
