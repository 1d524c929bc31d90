"""The Docker runtime's container, built from a launch without an engine: image, mounts,
environment, labels, GPU device requests from (fake) GPU slots; and the runtime choice."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import docker.types
import pytest
from temporalio.exceptions import ApplicationError

import agent_worker.docker_engine as docker_engine
from agent_worker.container_spec import (
    CONTAINER_RUN_DIR,
    CONTAINER_TRIAL_INFO,
    CONTAINER_WORKDIR,
    container_spec,
    gpu_device_requests,
)
from agent_worker.determined_env import SHARED_FS_CONTAINER_PATH
from agent_worker.docker_engine import split_lines
from agent_worker.docker_runtime import DockerRuntime
from agent_worker.main import AgentConfig, make_runtime, parse_args
from agent_worker.process_runtime import ProcessRuntime
from agent_worker.runtime import Launch
from agent_worker.sandbox import CONTAINER_USER, TaskUser, TaskUserError, container_user_for_agent
from agent_worker.slots import TYPE_CPU, TYPE_CUDA, Slot, cpu_slots, discover_slots
from common.expconf import DEFAULT_SHM_SIZE, ResourcesConfig, TaskConfig
from deploy import local_cluster
from task_image import image as task_image
from tests.fakes.run_specs import full_config, spec_of
from wire.run_spec import RunSpec
from wire.workflow_io import RunTaskInput, RunTrialInput

# GPU slots as slots.py makes them from NVML (a fake: there is no GPU here).
GPUS = [Slot(id=i, type=TYPE_CUDA, brand="NVIDIA A100", uuid=f"GPU-{i}aaa-{i}bbb")
        for i in range(4)]


def launch(tmp_path: Path, config: dict[str, Any] | None = None,
           slot_ids: list[int] | None = None) -> Launch:
    cfg = {"entrypoint": "python3 train.py", "resources": {"resource_pool": "default"},
           "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path / "ckpt")},
           **(config or {})}
    inp = RunTrialInput(experiment_id=3, trial_id=9, run_id=2, hparams={},
                        config=full_config(cfg), trial_seed=1, latest_checkpoint=None,
                        steps_completed=0)
    return Launch(input=inp, spec=spec_of(cfg), run_dir=tmp_path / "run",
                  entrypoint="python3 train.py",
                  env={"EPOCHAL_TRIAL_INFO": str(tmp_path / "run" / "trial_info.json"),
                       "EPOCHAL_MASTER": "http://127.0.0.1:8080", "MINE": "x"},
                  slot_ids=slot_ids if slot_ids is not None else [0])


def spec_kwargs(tmp_path: Path, config: dict[str, Any] | None = None,
                slots: list[Slot] | None = None, slot_ids: list[int] | None = None,
                **kw: Any) -> dict[str, Any]:
    spec = container_spec(launch(tmp_path, config, slot_ids), agent_id="agent/1",
                          slots=slots if slots is not None else cpu_slots(2),
                          default_image="epochal-task:abc", **kw)
    return spec.create_kwargs()


def mounts(kwargs: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    return {m["Target"]: (m["Source"], m["ReadOnly"]) for m in kwargs["mounts"]}


def test_container_from_a_launch(tmp_path: Path) -> None:
    kw = spec_kwargs(tmp_path, user="1000:1000", master="http://master:8080")
    assert kw["image"] == "epochal-task:abc"
    assert kw["name"] == "epochal-agent_1-3.9.2"
    assert kw["command"][:2] == ["/bin/sh", "-c"]
    script = kw["command"][2]
    assert script.endswith("\npython3 train.py") and "\numask 077\n" in script  # private files
    # It ends with its agent: a watcher reads the agent's FIFO, if the agent mounted one.
    assert "[ -p /run/epochal/agent-alive ] && (read -r _ < /run/epochal/agent-alive; " in script
    assert kw["working_dir"] == CONTAINER_WORKDIR
    assert kw["network_mode"] == "host" and kw["init"] is True
    assert kw["shm_size"] == DEFAULT_SHM_SIZE
    assert kw["device_requests"] is None
    assert kw["user"] == "1000:1000"
    assert kw["cap_drop"] == ["ALL"] and kw["security_opt"] == ["no-new-privileges"]
    env = kw["environment"]
    assert env["EPOCHAL_TRIAL_INFO"] == CONTAINER_TRIAL_INFO == "/run/epochal/info/trial_info.json"
    assert env["EPOCHAL_MASTER"] == "http://127.0.0.1:8080"
    assert env["PYTHONPATH"] == CONTAINER_WORKDIR
    assert env["MINE"] == "x" and env["HOME"] == CONTAINER_RUN_DIR == "/run/epochal"
    assert "CUDA_VISIBLE_DEVICES" not in env
    assert kw["labels"] == {
        "ai.epochal.managed": "true", "ai.epochal.agent-id": "agent/1",
        "ai.epochal.master": "http://master:8080",  # two clusters' agents may share an id
        "ai.epochal.experiment-id": "3", "ai.epochal.trial-id": "9",
        "ai.epochal.trial-run-id": "2", "ai.epochal.task-id": "3.9",
        "ai.epochal.allocation-id": "3.9.2"}
    # The run's directory is its home and holds the working directory (`../data` is its own),
    # shared_fs storage is at its host path and where Determined's code looks for it.
    assert CONTAINER_WORKDIR == "/run/epochal/workdir"
    assert mounts(kw) == {
        CONTAINER_RUN_DIR: (str(tmp_path / "run"), False),
        CONTAINER_TRIAL_INFO: (str(tmp_path / "run" / "workdir" / "trial_info.json"), True),
        str(tmp_path / "ckpt"): (str(tmp_path / "ckpt"), False),
        SHARED_FS_CONTAINER_PATH: (str(tmp_path / "ckpt"), False),
    }


def task_launch(tmp_path: Path, task_type: str) -> Launch:
    inp = RunTaskInput(task_id="0b1c", task_type=task_type, slot_ids=[])
    return Launch(input=inp, spec=RunSpec.of(TaskConfig.model_validate({"bind_mounts": []})),
                  run_dir=tmp_path / "tasks" / "0b1c", entrypoint="jupyter lab",
                  env={"DET_TASK_ID": "0b1c"})


@pytest.mark.parametrize("euid", [0, 1000])
def test_every_container_runs_unprivileged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           euid: int) -> None:
    """Trials and interactive tasks alike: on the host's network, root or a capability
    (NET_RAW) would read the host's traffic, the cluster token in it (docs/SECURITY.md)."""
    monkeypatch.setattr("os.geteuid", lambda: euid)
    monkeypatch.setattr("os.getegid", lambda: euid)
    runtime = DockerRuntime(agent_id="a", slots=cpu_slots(1), default_image="img")
    launches = [launch(tmp_path), *(task_launch(tmp_path, t) for t in (
        "NOTEBOOK", "SHELL", "TENSORBOARD", "COMMAND"))]
    for kw in (runtime.spec(one).create_kwargs() for one in launches):
        uid, _, gid = kw["user"].partition(":")
        assert uid == str(euid or 65534) and int(uid) != 0 and int(gid) != 0
        assert kw["cap_drop"] == ["ALL"]
        assert kw["security_opt"] == ["no-new-privileges"]
        assert kw["environment"]["HOME"] == CONTAINER_RUN_DIR
        assert kw["network_mode"] == "host"  # distributed training across agents needs it
    # A root agent gives the run's files to the containers' user; another runs them as itself.
    assert runtime.task_owner == ((65534, 65534) if euid == 0 else None)


def test_an_interactive_tasks_directory_is_also_at_its_host_path(tmp_path: Path) -> None:
    """Its command names it so (Jupyter's root_dir, TensorBoard's logdir)."""
    run_dir = str(tmp_path / "tasks" / "0b1c")
    found = mounts(container_spec(task_launch(tmp_path, "NOTEBOOK"), agent_id="a", slots=[],
                                  default_image="d").create_kwargs())
    assert found == {CONTAINER_RUN_DIR: (run_dir, False), run_dir: (run_dir, False)}


def test_root_containers_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for root in ("0:0", "0", "root", "root:root"):
        with pytest.raises(ValueError, match="never run as root"):
            container_spec(launch(tmp_path), agent_id="a", slots=[], default_image="d",
                           user=root)
    with pytest.raises(TaskUserError, match="never run as root"):
        DockerRuntime(agent_id="a", task_user=TaskUser("toor", 0, 0))
    with pytest.raises(TaskUserError, match="--task-user 'root'.*never root"):
        container_user_for_agent("root", euid=0)
    with pytest.raises(SystemExit):
        parse_args(["--work-dir", str(tmp_path), "--runtime", "docker", "--task-user", "root"])
    # `auto` may pick the process runtime, where root is allowed: refused once Docker is picked.
    cfg, _ = parse_args(["--work-dir", str(tmp_path), "--runtime", "auto",
                         "--task-user", "root"])
    monkeypatch.setattr(docker_engine, "engine_answers", lambda timeout=3.0: True)
    with pytest.raises(TaskUserError, match="--task-user 'root'"):
        make_runtime(cfg, cpu_slots(1))


def test_the_container_user(monkeypatch: pytest.MonkeyPatch) -> None:
    assert container_user_for_agent(None, euid=0) == CONTAINER_USER
    assert (CONTAINER_USER.uid, CONTAINER_USER.gid) == (65534, 65534)
    daemon = container_user_for_agent("daemon", euid=0)  # a user of this host, by name
    assert daemon.name == "daemon" and daemon.uid not in (0, 65534)
    assert container_user_for_agent(None, euid=1000).uid == 1000  # the agent's own
    with pytest.raises(TaskUserError, match="needs root"):
        container_user_for_agent("daemon", euid=1000)
    with pytest.raises(TaskUserError, match="no such user"):
        container_user_for_agent("no-such-user-here", euid=0)


def test_determineds_info_and_model_copy_are_mounted_read_only(tmp_path: Path) -> None:
    for suffix in (".det-info", ".det-model"):
        (tmp_path / f"run{suffix}").mkdir()
    found = mounts(spec_kwargs(tmp_path))
    assert found["/run/determined/info"] == (str(tmp_path / "run.det-info"), True)
    assert found["/run/determined/train/model"] == (str(tmp_path / "run.det-model"), True)


def test_image_bind_mounts_shm_and_pull_from_the_config(tmp_path: Path) -> None:
    cfg = {"environment": {"image": {"cpu": "me/cpu:1", "cuda": "me/cuda:1"},
                           "force_pull_image": True},
           "bind_mounts": [{"host_path": "/data", "container_path": "/mnt/data",
                            "read_only": True},
                           {"host_path": "/scratch", "container_path": "/scratch"},
                           {"host_path": "/cache", "container_path": "cache"}],
           "resources": {"shm_size": 2 * 1024**3}}
    spec = container_spec(launch(tmp_path, cfg), agent_id="a", slots=cpu_slots(1),
                          default_image="d")
    assert spec.image == "me/cpu:1" and spec.force_pull
    assert spec.shm_size == 2 * 1024**3
    kw = spec.create_kwargs()
    assert mounts(kw)["/mnt/data"] == ("/data", True)
    assert mounts(kw)["/scratch"] == ("/scratch", False)
    assert mounts(kw)["/run/epochal/workdir/cache"] == ("/cache", False)  # as on Determined
    gpu = container_spec(launch(tmp_path, cfg, [1]), agent_id="a", slots=GPUS, default_image="d")
    assert gpu.image == "me/cuda:1"
    assert container_spec(launch(tmp_path, {"environment": {"image": "x:2"}}), agent_id="a",
                          slots=[], default_image="d").image == "x:2"


def test_a_bind_mount_whose_host_path_passes_through_a_link_is_refused(tmp_path: Path) -> None:
    """Docker follows it as root: a run that put a link in an allowed directory would hand the
    next run whatever it points at."""
    (tmp_path / "secret").mkdir()
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "link").symlink_to(tmp_path / "secret")
    cfg = {"bind_mounts": [{"host_path": str(tmp_path / "shared" / "link" / "."),
                            "container_path": "/data"}]}
    with pytest.raises(ApplicationError, match=r"bind_mounts\[0\].host_path: .* passes through "
                                               "a symbolic link") as refused:
        container_spec(launch(tmp_path, cfg), agent_id="a", slots=[], default_image="d")
    assert refused.value.non_retryable


def test_shm_sizes_are_the_models_bytes() -> None:
    stored = ResourcesConfig.model_validate({"shm_size": "512M"}).model_dump(mode="json")
    assert spec_of({"resources": stored}).shm_size == 512 * 1024**2
    assert spec_of({"resources": ResourcesConfig().model_dump(mode="json")}).shm_size == (
        DEFAULT_SHM_SIZE)
    assert spec_of({}).shm_size == DEFAULT_SHM_SIZE


def test_gpu_slots_become_one_device_request_by_uuid(tmp_path: Path) -> None:
    # The run got GPU slots 3 and 1 of four.
    kw = spec_kwargs(tmp_path, slots=GPUS, slot_ids=[3, 1])
    (request,) = kw["device_requests"]
    assert isinstance(request, docker.types.DeviceRequest)
    assert request == {"Driver": "nvidia", "Count": 0,
                       "DeviceIDs": ["GPU-3aaa-3bbb", "GPU-1aaa-1bbb"],
                       "Capabilities": [["gpu"]], "Options": {}}
    # The same GPUs, in the same order, whatever numbering the container gives them.
    assert kw["environment"]["CUDA_VISIBLE_DEVICES"] == "GPU-3aaa-3bbb,GPU-1aaa-1bbb"
    assert gpu_device_requests(cpu_slots(2)) == []
    with pytest.raises(ApplicationError):
        gpu_device_requests([Slot(id=0, type=TYPE_CUDA, brand="x", uuid=None)])


def fake_nvml(uuids: list[str]) -> Any:
    """Just what slots.gpu_slots asks NVML."""
    return SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: len(uuids),
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: b"NVIDIA A100-SXM4-40GB",
        nvmlDeviceGetUUID=lambda h: uuids[h].encode(),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(total=40 << 30))


def test_gpus_found_by_nvml_are_passed_by_uuid(tmp_path: Path) -> None:
    slots = discover_slots(nvml=fake_nvml(["GPU-aaa", "GPU-bbb"]))
    runtime = DockerRuntime(agent_id="a", slots=slots, default_image="img")
    kw = runtime.spec(launch(tmp_path, slot_ids=[1])).create_kwargs()
    (request,) = kw["device_requests"]
    assert request["DeviceIDs"] == ["GPU-bbb"] and request["Driver"] == "nvidia"
    assert kw["environment"]["CUDA_VISIBLE_DEVICES"] == "GPU-bbb"


def test_log_chunks_become_lines() -> None:
    chunks = [b"a\nb", b"c\r\n", b"", b"d\ne\n", b"tail"]
    assert list(split_lines(iter(chunks))) == ["a", "bc", "d", "e", "tail"]


def test_runtime_choice(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def config(*argv: str) -> AgentConfig:
        cfg, _ = parse_args(["--work-dir", str(tmp_path), "--agent-id", "a", *argv])
        return cfg

    slots = [Slot(id=0, type=TYPE_CPU, brand="cpu")]
    assert config().runtime == "process"
    assert isinstance(make_runtime(config(), slots), ProcessRuntime)
    docker_rt = make_runtime(config("--runtime", "docker", "--image-pull", "never"), slots)
    assert isinstance(docker_rt, DockerRuntime)
    assert docker_rt.pull_policy == "never" and docker_rt.agent_id == "a"
    named = make_runtime(config("--runtime", "docker", "--task-user", "daemon"), slots)
    assert isinstance(named, DockerRuntime) and named.task_user.name == "daemon"
    monkeypatch.setattr(docker_engine, "engine_answers", lambda timeout=3.0: False)
    assert isinstance(make_runtime(config("--runtime", "auto"), slots), ProcessRuntime)
    monkeypatch.setattr(docker_engine, "engine_answers", lambda timeout=3.0: True)
    assert isinstance(make_runtime(config("--runtime", "auto"), slots), DockerRuntime)
    with pytest.raises(SystemExit):
        config("--runtime", "vm")


def test_local_cluster_remembers_the_agent_runtime(tmp_path: Path) -> None:
    s = local_cluster.ClusterSettings(state_dir=tmp_path, agent_runtime="docker")
    local_cluster._save_settings(s)
    loaded = local_cluster.load_settings(tmp_path)
    assert loaded.agent_runtime == "docker"
    cmd = local_cluster._agent_command(loaded, local_cluster.cluster_info(loaded))
    assert cmd[cmd.index("--runtime") + 1] == "docker"
    overridden = local_cluster.load_settings(tmp_path, agent_runtime="process")
    assert overridden.agent_runtime == "process"
    assert "--task-env" not in cmd


def test_local_cluster_remembers_the_task_environment(tmp_path: Path) -> None:
    local_cluster._save_settings(
        local_cluster.ClusterSettings(state_dir=tmp_path, agent_task_env="/envs/train"))
    loaded = local_cluster.load_settings(tmp_path)
    cmd = local_cluster._agent_command(loaded, local_cluster.cluster_info(loaded))
    assert cmd[cmd.index("--task-env") + 1] == "/envs/train"
    cleared = local_cluster.load_settings(tmp_path, agent_task_env="")
    assert "--task-env" not in local_cluster._agent_command(
        cleared, local_cluster.cluster_info(cleared))


def test_task_image_tag_follows_the_harness_and_the_recipe(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tag = task_image.task_image_tag()
    assert tag.startswith("epochal-task:") and tag == task_image.task_image_tag()
    assert task_image.base_image_tag().startswith("epochal-task-base:")
    fake = tmp_path / "harness"
    (fake / "core").mkdir(parents=True)
    (fake / "core" / "x.py").write_text("A = 1\n")
    monkeypatch.setattr(task_image, "harness_dir", lambda: fake)
    other = task_image.task_image_tag()
    assert other != tag
    (fake / "core" / "x.py").write_text("A = 2\n")
    assert task_image.task_image_tag() != other
    assert "python3-sklearn" in task_image.packages()


def test_debian_mirror_from_the_apt_sources(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EPOCHAL_DEBIAN_MIRROR", raising=False)
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm\n")
    assert task_image.debian_mirror(tmp_path) == "http://mirror.example/debian"
    (tmp_path / "sources.list").write_text(
        "deb [arch=amd64] http://old.example/debian bookworm main\n")
    assert task_image.debian_mirror(tmp_path) == "http://old.example/debian"
    assert task_image.debian_mirror(tmp_path / "none") == task_image.DEFAULT_MIRROR
    monkeypatch.setenv("EPOCHAL_DEBIAN_MIRROR", "http://env.example/debian/")
    assert task_image.debian_mirror(tmp_path) == "http://env.example/debian"
