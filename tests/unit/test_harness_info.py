"""Trial info: parsing the agent's JSON into TrialInfo, once, from the environment."""

import json

import pytest

from harness.core import TrialInfo, _info

INFO = {
    "master_url": "http://127.0.0.1:8080",
    "cluster_id": "c1",
    "agent_id": "agent-1",
    "experiment_id": 1,
    "trial_id": 3,
    "trial_run_id": 2,
    "task_id": "1.3",
    "allocation_id": "1.3.2",
    "trial_seed": 123,
    "hparams": {"learning_rate": 0.1, "optimizer": {"momentum": 0.9}},
    "experiment_config": {"name": "x"},
    "latest_checkpoint": "6f7c9a4e-0000-4000-8000-000000000000",
    "steps_completed": 150,
    "max_length": {"batches": 300},
    "checkpoint_storage": {"type": "shared_fs", "host_path": "/tmp/ckpt"},
    "slot_ids": [0],
    "session_token": None,
}


def test_parses_every_field() -> None:
    info = TrialInfo.from_dict(INFO)
    assert (info.experiment_id, info.trial_id, info.trial_run_id) == (1, 3, 2)
    assert (info.task_id, info.allocation_id) == ("1.3", "1.3.2")
    assert info.trial_seed == 123
    assert info.hparams["optimizer"] == {"momentum": 0.9}
    assert info.latest_checkpoint == INFO["latest_checkpoint"]
    assert (info.steps_completed, info.max_length, info.length_unit) == (150, 300, "batches")
    assert info.checkpoint_storage["host_path"] == "/tmp/ckpt"
    assert (info.master_url, info.agent_id, info.session_token) == (
        "http://127.0.0.1:8080", "agent-1", None,
    )
    assert info.on_cluster and info.slot_ids == (0,)


def test_info_is_frozen() -> None:
    info = TrialInfo.from_dict(INFO)
    with pytest.raises(AttributeError):
        info.trial_id = 4  # type: ignore[misc]


@pytest.mark.parametrize(
    ("max_length", "expected"),
    [({"epochs": 2}, (2, "epochs")), ({"records": 640}, (640, "records")), (50, (50, "batches"))],
)
def test_length_units(max_length: object, expected: tuple[int, str]) -> None:
    info = TrialInfo.from_dict({**INFO, "max_length": max_length})
    assert (info.max_length, info.length_unit) == expected


def test_defaults_derive_ids_and_storage_from_config() -> None:
    data = {
        k: v
        for k, v in INFO.items()
        if k not in ("task_id", "allocation_id", "checkpoint_storage", "max_length")
    }
    data["experiment_config"] = {
        "checkpoint_storage": {"type": "shared_fs", "host_path": "/cfg"},
        "searcher": {"max_length": {"batches": 7}},
    }
    info = TrialInfo.from_dict(data)
    assert (info.task_id, info.allocation_id) == ("1.3", "1.3.2")
    assert info.checkpoint_storage == {"type": "shared_fs", "host_path": "/cfg"}
    assert info.max_length == 7


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"trial_id": None}, "trial_id is missing"),
        ({"trial_id": "3"}, "trial_id must be an int"),
        ({"trial_seed": True}, "trial_seed must be an int"),
        ({"max_length": {"": 3}}, "max_length unit must be a name"),
        ({"max_length": {"batches": 0}}, "max_length.batches must be an int >= 1"),
        ({"hparams": [1]}, "hparams must be an object"),
        ({"master_url": None}, "master_url is missing"),
        ({"steps_completed": -1}, "steps_completed must be >= 0"),
    ],
)
def test_bad_info_names_the_field(change: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TrialInfo.from_dict({**INFO, **change})


def test_read_once_from_environment(tmp_path, monkeypatch) -> None:
    path = tmp_path / "trial_info.json"
    path.write_text(json.dumps(INFO))
    _info._load.cache_clear()
    env = {"EPOCHAL_TRIAL_INFO": str(path), "EPOCHAL_MASTER": "http://master:9"}
    first = _info.from_environment(env)
    path.write_text("not json any more")
    assert _info.from_environment(env) is first  # cached, not read again
    assert first is not None and first.master_url == "http://master:9"
    assert _info.from_environment({}) is None
    _info._load.cache_clear()


def test_unreadable_file_is_a_clear_error(tmp_path) -> None:
    path = tmp_path / "trial_info.json"
    path.write_text("{")
    with pytest.raises(ValueError, match="cannot read trial info from"):
        TrialInfo.from_file(path)
    path.write_text(json.dumps({**INFO, "trial_seed": "x"}))
    with pytest.raises(ValueError, match=r"trial_info\.json: trial info: trial_seed"):
        TrialInfo.from_file(path)


def test_off_cluster_info() -> None:
    info = TrialInfo.off_cluster(hparams={"a": 1}, max_length=5, checkpoint_dir="/tmp/x")
    assert not info.on_cluster
    assert (info.hparams, info.max_length, info.length_unit) == ({"a": 1}, 5, "batches")
    assert info.checkpoint_storage == {"type": "shared_fs", "host_path": "/tmp/x"}
    with pytest.raises(TypeError, match="hparams must be a dict"):
        TrialInfo.off_cluster(hparams=[1])  # type: ignore[arg-type]
