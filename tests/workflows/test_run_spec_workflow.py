"""Each `run_trial` a trial workflow schedules carries the run's RunSpec (wire/run_spec.py),
built by the master's builder from the stored config; histories from before it replay without
one (tests/replay), and the agent then builds the same spec (tests/unit/test_run_spec.py)."""

from __future__ import annotations

import asyncpg
from temporalio.client import Client
from temporalio.worker import Worker

from common.expconf import stored_config
from tests.replay.recording import save_experiment
from tests.workflows.test_experiment_workflow import (
    ended,
    make_config,
    start_agent,
    start_experiment,
    stop_agent,
    succeed,
)
from wire.run_spec import RunSpec, trial_run_spec


async def test_every_run_carries_the_spec_built_from_its_config(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    agent, pool_name = await start_agent(temporal_client, pool, succeed)
    config = make_config(pool_name, max_concurrent_trials=4)
    config["environment"]["environment_variables"] = {"SEEN": "yes"}
    config["bind_mounts"] = [{"host_path": "/data/./sets", "container_path": "sets",
                              "read_only": True}]
    handle = (await start_experiment(temporal_client, pool, config))[1]
    try:
        assert await ended(handle, 60) == "COMPLETED"
    finally:
        await stop_agent(agent)
    await save_experiment(temporal_client, handle, "run-spec")
    assert len(agent.runs) == 4
    for run in agent.runs:
        built = RunSpec.of(stored_config(run.config), run.config)
        assert run.config == config and run.spec == built.model_dump(mode="json")
        assert trial_run_spec(run) == built
        assert built.environment_variables == {"SEEN": "yes"}
        assert [m.host_path for m in built.bind_mounts] == ["/data/sets"]
        assert built.checkpoint_storage is not None
        assert built.checkpoint_storage.directory == "/tmp/epochal-wf-test"
