"""The run spec (wire/run_spec.py): what the agent runs, built once from the stored config by
the master's builder, through Temporal's converter unchanged, and built by the same builder on
the agent for a run scheduled without one."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import httpx
import pytest
import temporalio.converter

from agent_worker.process_runtime import ProcessRuntime
from agent_worker.slots import SlotPool, cpu_slots
from agent_worker.task_runs import TaskActivities
from agent_worker.trial_runs import AgentActivities
from common.expconf import (
    DEFAULT_SHM_SIZE,
    TaskConfig,
    parse_experiment_config,
    stored_config,
    validate_task_config,
)
from common.payload_codec import data_converter
from wire.run_spec import CheckpointStorage, Mount, RunSpec, task_run_spec, trial_run_spec
from wire.workflow_io import RunTaskInput, RunTrialInput

SUBMITTED = """
entrypoint: [python3, train.py, --epochs, "2"]
searcher: {name: single, metric: loss, max_length: {epochs: 3}}
checkpoint_storage: {type: shared_fs, host_path: /mnt/ckpts/, storage_path: runs/a}
environment:
  image: {cpu: "me/cpu:1 ", cuda: me/cuda:1}
  environment_variables: {cpu: ["A=1"], cuda: ["A=1", "B=2"]}
  force_pull_image: true
bind_mounts:
  - {host_path: /data/./sets/, container_path: /mnt/data, read_only: true}
  - {host_path: /scratch, container_path: cache}
resources: {shm_size: 2G}
profiling: {enabled: true}
debug: true
"""


def stored(text: str = SUBMITTED) -> dict[str, Any]:
    """A config as the API stores it: validated, normalised, dumped."""
    return parse_experiment_config(text).model_dump(mode="json")


def test_a_spec_holds_the_configs_normalised_values() -> None:
    config = stored()
    spec = RunSpec.of(stored_config(config), config)
    assert spec.entrypoint == "python3 train.py --epochs 2"  # one command line
    assert spec.environment_variables == {"A": "1", "B": "2"}  # one mapping, per device merged
    assert (spec.image, spec.cuda_image) == ("me/cpu:1", "me/cuda:1")
    assert (spec.image_for(cuda=False), spec.image_for(cuda=True)) == ("me/cpu:1", "me/cuda:1")
    assert spec.force_pull_image and spec.profiling and spec.debug
    assert spec.shm_size == 2 * 1024**3
    assert spec.bind_mounts == [
        Mount(host_path="/data/sets", container_path="/mnt/data", read_only=True),
        Mount(host_path="/scratch", container_path="cache", read_only=False)]
    assert spec.checkpoint_storage == CheckpointStorage(
        stored=config["checkpoint_storage"], directory="/mnt/ckpts/runs/a",
        host_path="/mnt/ckpts/", s3=False)
    assert spec.max_length == {"epochs": 3}
    assert spec.experiment_config == config  # passed on to the trial as stored


def test_defaults_have_their_home_in_the_config_model() -> None:
    config = stored("entrypoint: python3 train.py\nsearcher: {name: single, metric: loss}\n")
    spec = RunSpec.of(stored_config(config), config)
    assert spec.shm_size == DEFAULT_SHM_SIZE == 4 * 1024**3
    assert spec.environment_variables == {} and spec.bind_mounts == []
    assert spec.image is None and spec.cuda_image is None  # the agent's default image
    assert not spec.force_pull_image and not spec.profiling and not spec.debug
    assert spec.checkpoint_storage is None and spec.max_length is None
    # Without `stored`, the trial gets the model's dump.
    assert RunSpec.of(stored_config(config)) == spec


@pytest.mark.parametrize(("image", "cpu", "cuda"), [
    ("one:1", "one:1", "one:1"),
    ({"cpu": "c:1", "cuda": "g:1"}, "c:1", "g:1"),
    ({"cpu": "c:1", "rocm": "r:1"}, "c:1", "c:1"),  # no CUDA image: a CUDA run takes the CPU one
    ({"cuda": "g:1", "rocm": "r:1"}, None, "g:1"),  # none for the CPU: the agent's default
    ("  ", None, None),
])
def test_images_by_device(image: Any, cpu: str | None, cuda: str | None) -> None:
    config = stored("entrypoint: x\nsearcher: {name: single, metric: loss}\n")
    config["environment"]["image"] = image
    spec = RunSpec.of(stored_config(config), config)
    assert (spec.image, spec.cuda_image) == (cpu, cuda)


def test_s3_storage_gives_a_checkpoint_cache_and_no_directory() -> None:
    config = stored("entrypoint: x\nsearcher: {name: single, metric: loss}\n"
                    "checkpoint_storage: {type: s3, bucket: b, prefix: p}\n")
    storage = RunSpec.of(stored_config(config), config).checkpoint_storage
    assert storage is not None and storage.s3
    assert storage.directory is None and storage.host_path is None
    assert storage.stored == config["checkpoint_storage"]


def test_determined_sees_its_defaults_the_runs_target_and_where_storage_is() -> None:
    config = stored()
    spec = RunSpec.of(stored_config(config), config)
    mounted = spec.determined_config({"epochs": 1}, shared_fs_mounted=True)
    assert mounted["searcher"]["max_length"] == {"epochs": 1}
    assert mounted["checkpoint_storage"] == config["checkpoint_storage"]
    assert mounted["scheduling_unit"] == 100  # Determined's default, which its harness reads
    unmounted = spec.determined_config(None)
    assert unmounted["searcher"]["max_length"] == {"epochs": 3}
    assert unmounted["checkpoint_storage"] == {"type": "directory",
                                               "container_path": "/mnt/ckpts/runs/a"}
    assert spec.experiment_config == config  # untouched


def test_a_tasks_spec_is_its_configs() -> None:
    config = validate_task_config({
        "entrypoint": ["python3", "-c", "print(1)"],
        "environment": {"image": "t:1", "environment_variables": ["X=1"]},
        "bind_mounts": [{"host_path": "/data/", "container_path": "/data"}],
        "resources": {"slots": 0, "shm_size": "1G"}}, "COMMAND")
    spec = task_run_spec(config.model_dump(mode="json"))
    assert spec == RunSpec.of(config)
    assert spec.entrypoint == "python3 -c 'print(1)'"
    assert spec.environment_variables == {"X": "1"} and spec.image_for(cuda=True) == "t:1"
    assert spec.bind_mounts == [Mount(host_path="/data", container_path="/data",
                                      read_only=False)]
    assert spec.shm_size == 1024**3
    assert spec.checkpoint_storage is None and spec.experiment_config is None
    notebook = task_run_spec(TaskConfig().model_dump(mode="json"))
    assert notebook.entrypoint is None and notebook.shm_size == DEFAULT_SHM_SIZE


def run_input(config: dict[str, Any], spec: dict[str, Any] | None) -> RunTrialInput:
    return RunTrialInput(experiment_id=1, trial_id=2, run_id=3, hparams={}, config=config,
                         trial_seed=0, latest_checkpoint=None, steps_completed=0, spec=spec)


def test_a_run_scheduled_without_a_spec_gets_the_same_builders() -> None:
    config = stored()
    sent = RunSpec.of(stored_config(config), config)
    assert trial_run_spec(run_input(config, None)) == sent
    # With one, the agent takes it as sent (not from the config beside it).
    other = RunSpec.of(stored_config(stored("entrypoint: y\nsearcher: {name: single, "
                                            "metric: l}\n")))
    assert trial_run_spec(run_input(config, other.model_dump(mode="json"))) == other


@pytest.mark.parametrize("converter", [temporalio.converter.DataConverter.default,
                                       data_converter("a-cluster-token")],
                         ids=["default", "encrypted"])
async def test_the_spec_travels_through_temporal_unchanged(
        converter: temporalio.converter.DataConverter) -> None:
    config = stored()
    spec = RunSpec.of(stored_config(config), config)
    inp = run_input(config, spec.model_dump(mode="json"))
    payloads = await converter.encode([inp])
    (decoded,) = await converter.decode(payloads, [RunTrialInput])
    assert decoded == inp
    assert trial_run_spec(decoded) == spec
    # A run from before RunSpec (no `spec` in its payload) decodes with none.
    old = {k: v for k, v in dataclasses.asdict(inp).items() if k != "spec"}
    (before,) = await converter.decode(await converter.encode([old]), [RunTrialInput])
    assert before.spec is None and trial_run_spec(before) == spec


async def test_the_agent_prepares_a_task_from_the_spec_of_its_fetched_config(
        tmp_path: Path) -> None:
    config = validate_task_config({"entrypoint": "echo hi", "environment": {
        "environment_variables": {"X": "1", "DET_USER": "not-theirs"}}}, "COMMAND")
    launch = {"taskId": "t1", "taskType": "COMMAND", "config": config.model_dump(mode="json"),
              "secret": "s", "publicKey": None, "username": "ann", "owner": None,
              "userToken": "tok", "experimentIds": [], "trialIds": [], "hasContext": False}

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/v1/tasks/t1/launch"
        return httpx.Response(200, json=launch)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        agent = AgentActivities(agent_id="a1", master_url="http://master", work_dir=tmp_path,
                                http=http, runtime=ProcessRuntime(), slots=SlotPool(cpu_slots(1)))
        prepared = await TaskActivities(agent).prepare(
            RunTaskInput(task_id="t1", task_type="COMMAND", slot_ids=[0]), "http://master", [0])
    assert prepared.spec == RunSpec.of(config)
    assert prepared.entrypoint.endswith("echo hi")
    assert prepared.env["X"] == "1" and prepared.env["DET_USER"] == "ann"  # Determined's win
    assert prepared.service is None and prepared.workdir.is_dir()
