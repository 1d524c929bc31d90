"""ASHA through the real workflows, the real API gate (`store_reports`) and a real dev server.

The agent's `run_trial` is a scripted stand-in: it "trains" a trial whose validation loss at
step s is `lr + 1/s` (so smaller lr is better at every length), reports each validation through
the API's own code path, keeps a checkpoint per validation, resumes from the latest one, and
obeys preemption as the harness does.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.worker import Worker
from temporalio.workflow import NondeterminismError

from api.routes.trials import Metrics, ReportTrialMetricsRequest, TrialMetrics, store_reports
from common.expconf import validate_experiment_config
from common.temporal_names import MASTER_TASK_QUEUE, experiment_workflow_id
from deploy.master import build_worker
from tests.replay.recording import save, tag
from tests.workflows.pool_helpers import fake_agent
from tests.workflows.test_experiment_workflow import ended
from wire.workflow_io import ExperimentInput, RunTrialInput, RunTrialResult

VALIDATION_PERIOD = 5
# A stop reaches the trainer a few tenths of a second after the validation that decided it
# (longer on a loaded 2-core machine): a trial stopped at the first rung has the six validations
# after it, 0.6 s, to see it before it would train to the end.
STEP_SECONDS = 0.1
LRS = [0.8, 0.1, 0.6, 0.3, 0.7, 0.2, 0.5, 0.4]


class ScriptedTrainer:
    """A stand-in agent that trains like the harness-based example would."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        client: Client,
        invalid_lr: float | None = None,
        metric: str = "loss",
    ) -> None:
        self.pool = pool
        self.client = client
        self.invalid_lr = invalid_lr
        self.metric = metric
        self.runs: list[RunTrialInput] = []
        self.stopped_at: dict[int, int] = {}  # trial -> the step whose report's answer stopped it

    @activity.defn(name="run_trial")
    async def run_trial(self, inp: RunTrialInput) -> RunTrialResult:
        self.runs.append(inp)
        lr = float(inp.hparams["lr"])
        if lr == self.invalid_lr:
            await self.pool.execute(
                "UPDATE trials SET early_exit_reason = 'EXITED_REASON_INVALID_HP' WHERE id = $1",
                inp.trial_id,
            )
            return RunTrialResult(exit_code=0, agent_id="scripted")
        target = next(iter((inp.max_length or inp.config["searcher"]["max_length"]).values()))
        step = inp.steps_completed
        while step < target:
            activity.heartbeat()
            step = min(step + VALIDATION_PERIOD, target)
            await asyncio.sleep(STEP_SECONDS)
            if await self._validate(inp, step, lr + 1.0 / step):
                self.stopped_at[inp.trial_id] = step
                break
            if await self.pool.fetchval(
                "SELECT preempt_requested FROM trials WHERE id = $1", inp.trial_id
            ):
                break
        return RunTrialResult(exit_code=0, agent_id="scripted")

    async def _validate(self, inp: RunTrialInput, step: int, loss: float) -> bool:
        """Whether the report's answer says the searcher stopped the trial."""
        report = ReportTrialMetricsRequest(
            group="validation",
            metrics=TrialMetrics(
                trialId=inp.trial_id,
                trialRunId=inp.run_id,
                stepsCompleted=step,
                metrics=Metrics(avgMetrics={self.metric: loss}),
            ),
        )
        _, stopped = await store_reports(self.pool, self.client, inp.trial_id, [report])
        await self.pool.execute(
            "INSERT INTO checkpoints (uuid, trial_id, task_id, allocation_id, steps_completed,"
            " storage_path) VALUES ($1, $2, '', '', $3, $4)",
            uuid.uuid4(),
            inp.trial_id,
            step,
            f"/tmp/epochal-asha-test/{uuid.uuid4()}",
        )
        return stopped


@asynccontextmanager
async def scripted_agent(
    client: Client, pool_name: str, trainer: ScriptedTrainer, slots: int = 2
) -> AsyncIterator[None]:
    # An agent of the test's pool: the scheduler places runs on its own queue.
    async with fake_agent(client, pool_name, f"{pool_name}-agent", slots, [trainer.run_trial]):
        yield


def asha_config(pool_name: str, **searcher: Any) -> dict[str, Any]:
    raw = {
        "name": "asha-test",
        "entrypoint": "python3 train.py",
        "hyperparameters": {"lr": {"type": "categorical", "vals": LRS}},
        "searcher": {
            "name": "async_halving",
            "metric": "loss",
            "num_rungs": 3,
            "divisor": 2,
            "max_length": {"batches": 40},
            "max_trials": 8,
            "max_concurrent_trials": 2,
            **searcher,
        },
        "resources": {"resource_pool": pool_name},
        "max_restarts": 0,
        "checkpoint_storage": {"type": "shared_fs", "host_path": "/tmp/epochal-asha-test"},
    }
    return validate_experiment_config(raw).model_dump(mode="json")


async def run_experiment(
    client: Client,
    pool: asyncpg.Pool,
    trainer: ScriptedTrainer,
    config: dict[str, Any],
    max_history_events: int = 0,
) -> tuple[int, WorkflowHandle[Any, str], str]:
    experiment_id = await pool.fetchval(
        "INSERT INTO experiments (name, config, original_config, seed)"
        " VALUES ($1, $2, '', 11) RETURNING id",
        config["name"],
        config,
    )
    async with scripted_agent(client, config["resources"]["resource_pool"], trainer):
        handle = await client.start_workflow(
            "ExperimentWorkflow",
            ExperimentInput(
                experiment_id=experiment_id,
                config=config,
                seed=11,
                max_history_events=max_history_events,
            ),
            id=experiment_workflow_id(experiment_id),
            task_queue=MASTER_TASK_QUEUE,
            result_type=str,
        )
        try:
            result = await ended(handle, 120)
        except TimeoutError:  # say where the search stood
            described = await handle.query("describe")
            stood = [dict(t) for t in await trials_of(pool, experiment_id)]
            raise AssertionError(f"the search did not end: {described}; trials: {stood}") from None
    return experiment_id, handle, result


async def trials_of(pool: asyncpg.Pool, experiment_id: int) -> list[asyncpg.Record]:
    return await pool.fetch(
        "SELECT id, hparams, state, steps_completed, rung, search_status, early_exit_reason"
        " FROM trials WHERE experiment_id = $1 ORDER BY request_id",
        experiment_id,
    )


def pool_name() -> str:
    return f"asha-{uuid.uuid4().hex[:8]}"


async def test_stopping_asha_stops_bad_trials_early_and_trains_the_best_to_the_end(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    trainer = ScriptedTrainer(pool, temporal_client)
    experiment_id, handle, result = await run_experiment(
        temporal_client, pool, trainer, asha_config(pool_name())
    )
    assert result == "COMPLETED"
    trials = await trials_of(pool, experiment_id)
    assert len(trials) == 8
    assert {t["state"] for t in trials} == {"COMPLETED"}
    by_lr = {t["hparams"]["lr"]: t for t in trials}
    assert by_lr[0.1]["steps_completed"] == 40  # the best trains to max_length
    assert by_lr[0.1]["search_status"] == "trained to the end"
    stopped = [t for t in trials if (t["search_status"] or "").startswith("stopped early")]
    assert stopped, "ASHA stopped no trial early"
    assert all(t["steps_completed"] < 40 for t in stopped)
    assert len(stopped) >= 2
    # Each was told by the answer to the validation the searcher stopped it on, at a rung's
    # length: it trained not one step past the decision.
    assert {t["id"]: t["steps_completed"] for t in stopped} == {
        t["id"]: trainer.stopped_at.get(t["id"]) for t in stopped}
    assert {t["steps_completed"] for t in stopped} <= {10, 20}
    assert sum(t["steps_completed"] for t in trials) < 8 * 40
    best = await pool.fetchval(
        "SELECT best_trial_id FROM experiments WHERE id = $1", experiment_id
    )
    assert best == by_lr[0.1]["id"]
    save("asha-stopping-experiment", await handle.fetch_history())


async def test_classic_asha_pauses_at_rungs_and_resumes_promoted_trials(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    trainer = ScriptedTrainer(pool, temporal_client)
    experiment_id, handle, result = await run_experiment(
        temporal_client, pool, trainer, asha_config(pool_name(), stop_once=False)
    )
    assert result == "COMPLETED"
    trials = await trials_of(pool, experiment_id)
    assert len(trials) == 8
    resumed = [r for r in trainer.runs if r.run_id > 1]
    assert resumed, "no trial was promoted"
    for run in resumed:  # a promotion resumes from the checkpoint at its rung
        assert (run.steps_completed, run.max_length) in (
            (10, {"batches": 20}),
            (20, {"batches": 40}),
        )
    by_lr = {t["hparams"]["lr"]: t for t in trials}
    assert by_lr[0.1]["steps_completed"] == 40
    assert sum(t["steps_completed"] for t in trials) < 8 * 40
    save("asha-promotion-experiment", await handle.fetch_history())


async def test_search_state_survives_continue_as_new(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    trainer = ScriptedTrainer(pool, temporal_client)
    experiment_id, _, result = await run_experiment(
        temporal_client, pool, trainer, asha_config(pool_name()), max_history_events=60
    )
    assert result == "COMPLETED"
    runs = [
        e
        async for e in temporal_client.list_workflows(
            f"WorkflowId = '{experiment_workflow_id(experiment_id)}'"
        )
    ]
    assert sum(r.status == WorkflowExecutionStatus.CONTINUED_AS_NEW for r in runs) >= 2
    trials = await trials_of(pool, experiment_id)
    assert len(trials) == 8
    assert {t["hparams"]["lr"]: t["steps_completed"] for t in trials}[0.1] == 40


async def test_a_sampler_that_fails_ends_the_search_in_error_saying_why(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    """An option Optuna takes by name but cannot work with fails the first draw: the experiment
    ends in ERROR with the sampler's error as its reason, and no trial is created (before, the
    draw was retried for ever and the experiment stayed ACTIVE)."""
    trainer = ScriptedTrainer(pool, temporal_client)
    config = asha_config(pool_name(),
                         sampler={"name": "tpe", "options": {"n_startup_trials": "ten"}})
    experiment_id, _, result = await run_experiment(temporal_client, pool, trainer, config)
    assert result == "ERROR"
    row = await pool.fetchrow("SELECT state, error FROM experiments WHERE id = $1", experiment_id)
    assert row["state"] == "ERROR"
    assert row["error"].startswith("searcher.sampler 'tpe' failed: TypeError"), row["error"]
    assert await trials_of(pool, experiment_id) == []


async def test_asha_with_a_sampler_draws_each_trial_from_the_reports_before_it(
    temporal_client: Client, temporal_address: str, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    """`sampler: tpe`: the experiment draws each trial's hyperparameters through the
    `sample_trial_hparams` activity (Optuna fitted on the trials so far) before creating it;
    ASHA stops trials as before. A worker that caches nothing replays every task (a draw comes
    back from history, never drawn again), and the search continues as new with trials still
    to draw."""
    own_client = await Client.connect(temporal_address, namespace=temporal_client.namespace)
    forgetful = build_worker(own_client, pool,
                             max_cached_workflows=0,
                             workflow_failure_exception_types=[NondeterminismError])
    async with forgetful:
        trainer = ScriptedTrainer(pool, temporal_client)
        config = asha_config(pool_name(),
                             sampler={"name": "tpe", "options": {"n_startup_trials": 3}})
        experiment_id, _, result = await run_experiment(
            temporal_client, pool, trainer, config, max_history_events=60)
    assert result == "COMPLETED"
    trials = await trials_of(pool, experiment_id)
    assert len(trials) == 8
    assert all(t["hparams"]["lr"] in LRS for t in trials)
    continued = await continued_runs(temporal_client, experiment_id)
    assert continued, "the search never continued as new"
    draws = 0
    for run in [*continued,
                temporal_client.get_workflow_handle(experiment_workflow_id(experiment_id))]:
        history = await run.fetch_history()
        draws += sum(e.activity_task_scheduled_event_attributes.activity_type.name
                     == "sample_trial_hparams" for e in history.events)
    assert draws == 8
    assert any((t["search_status"] or "").startswith("stopped early") for t in trials)


async def test_invalid_hyperparameters_are_replaced(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    trainer = ScriptedTrainer(pool, temporal_client, invalid_lr=0.6)
    experiment_id, _, result = await run_experiment(
        temporal_client, pool, trainer, asha_config(pool_name())
    )
    assert result == "COMPLETED"
    trials = await trials_of(pool, experiment_id)
    invalid = [t for t in trials if t["early_exit_reason"] == "EXITED_REASON_INVALID_HP"]
    assert len(invalid) >= 1
    assert len(trials) - len(invalid) == 8  # the invalid ones do not count against max_trials


async def test_classic_asha_errors_a_trial_that_never_reports_the_metric_at_its_rung(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    """Waiting at a rung for a promotion needs a rank; without the metric there is none, so
    the trial ends in ERROR naming it (other searchers complete such trials with a warning:
    tests/workflows/test_experiment_workflow.py)."""
    trainer = ScriptedTrainer(pool, temporal_client, metric="accuracy")
    config = asha_config(pool_name(), stop_once=False, max_trials=2)
    experiment_id, _, result = await run_experiment(temporal_client, pool, trainer, config)
    assert result == "ERROR"
    trials = await trials_of(pool, experiment_id)
    assert [t["state"] for t in trials] == ["ERROR", "ERROR"]
    log = await pool.fetchval(
        "SELECT log FROM task_logs WHERE trial_id = $1 AND level = 'ERROR' ORDER BY id DESC",
        trials[0]["id"],
    )
    assert 'searcher metric "loss"' in log and "accuracy" in log


async def test_a_search_survives_workers_that_forget_everything(
    temporal_client: Client, temporal_address: str, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    """A second master worker that caches no workflow rebuilds the search from history on every
    task it takes, as a restarted worker does: the search still ends with the same outcome."""
    own_client = await Client.connect(temporal_address, namespace=temporal_client.namespace)
    forgetful = build_worker(
        own_client,
        pool,
        max_cached_workflows=0,
        # A replay that decides differently fails the workflow (and so the test) at once.
        workflow_failure_exception_types=[NondeterminismError],
    )
    async with forgetful:
        trainer = ScriptedTrainer(pool, temporal_client)
        experiment_id, _, result = await run_experiment(
            temporal_client, pool, trainer, asha_config(pool_name())
        )
    assert result == "COMPLETED"
    trials = await trials_of(pool, experiment_id)
    assert len(trials) == 8
    assert {t["hparams"]["lr"]: t["steps_completed"] for t in trials}[0.1] == 40


async def continued_runs(client: Client, experiment_id: int) -> list[WorkflowHandle[Any, Any]]:
    """The runs of the experiment's workflow that continued as new, oldest first."""
    runs = [r async for r in client.list_workflows(
        f"WorkflowId = '{experiment_workflow_id(experiment_id)}'")]
    runs = [r for r in runs if r.status == WorkflowExecutionStatus.CONTINUED_AS_NEW]
    return [client.get_workflow_handle(r.id, run_id=r.run_id)
            for r in sorted(runs, key=lambda r: r.start_time)]


async def test_a_random_search_continues_as_new_with_the_trials_it_has_not_started(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    trainer = ScriptedTrainer(pool, temporal_client)
    raw = asha_config(pool_name())
    raw["searcher"] = {"name": "random", "metric": "loss", "max_length": {"batches": 10},
                       "max_trials": 12, "max_concurrent_trials": 2}
    config = validate_experiment_config(raw).model_dump(mode="json")
    experiment_id, _, result = await run_experiment(
        temporal_client, pool, trainer, config, max_history_events=25)
    assert result == "COMPLETED"
    trials = await trials_of(pool, experiment_id)
    assert len(trials) == 12 and {t["state"] for t in trials} == {"COMPLETED"}
    continued = await continued_runs(temporal_client, experiment_id)
    assert len(continued) >= 2
    # What each run carried into the next: the pending trials as where they start (regenerated
    # from the seed), and only the running trials' bookkeeping (at most 2 run at once).
    for handle in continued:
        history = await handle.fetch_history()
        event = history.events[-1].workflow_execution_continued_as_new_event_attributes
        carried = json.loads(event.input.payloads[0].data)["carried"]
        assert "pending" not in carried and 0 <= carried["pending_from"] <= 12
        assert len(carried["trial_of"]) <= 2 and len(carried["seen"]) <= 2
    if tag() is not None:  # a run with trials still pending
        save("random-continue-as-new-experiment", await continued[0].fetch_history())
