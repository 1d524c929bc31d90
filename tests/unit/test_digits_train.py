"""The digits example: it learns, resumes bit for bit, honours preemption and invalid hparams."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys
from typing import Any

import httpx
import numpy as np
import pytest
import yaml

import harness.core
from harness.core import TrialInfo

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "digits"


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("digits_train", EXAMPLE / "train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["digits_train"] = module
    spec.loader.exec_module(module)
    return module


digits = load_example()

HPARAMS = {
    "learning_rate": 0.05,
    "hidden_size": 24,
    "weight_decay": 1e-4,
    "activation": "tanh",
    "batch_size": 32,
    "optimizer": {"momentum": 0.9},
    "validation_period": 40,
}


def off_cluster(tmp_path: pathlib.Path, **kwargs: Any) -> harness.core.Context:
    kwargs = {"hparams": HPARAMS, "max_length": 130, "trial_seed": 11, **kwargs}
    return harness.core.init(checkpoint_dir=tmp_path / "ckpt", **kwargs)


def test_it_learns(tmp_path) -> None:
    with off_cluster(tmp_path) as core:
        result = digits.train(core)
    assert result.status == "completed" and result.steps_completed == 130
    assert result.validation["accuracy"] > 0.85
    assert result.validation["validation_loss"] < 0.6


def test_an_interrupted_run_resumes_bit_for_bit(tmp_path, monkeypatch) -> None:
    with off_cluster(tmp_path / "straight") as core:
        straight = digits.train(core)

    # Preempted between validations (and epochs): the run checkpoints and stops at batch 57.
    with off_cluster(tmp_path / "split") as core:
        calls = iter(range(10**6))
        monkeypatch.setattr(core.preempt, "should_preempt", lambda: next(calls) >= 56)
        first = digits.train(core)
    assert (first.status, first.steps_completed) == ("preempted", 57)
    with off_cluster(tmp_path / "split", latest_checkpoint=first.last_checkpoint) as core:
        second = digits.train(core)
    assert (second.status, second.steps_completed) == ("completed", 130)

    assert straight.params.keys() == second.params.keys()
    for name, value in straight.params.items():
        assert np.array_equal(value, second.params[name]), name
    assert straight.validation == second.validation
    # The checkpoints at the end hold the same bytes of weights too.
    a = np.load(tmp_path / "straight" / "ckpt" / straight.last_checkpoint / "weights.npz")
    b = np.load(tmp_path / "split" / "ckpt" / second.last_checkpoint / "weights.npz")
    assert all(np.array_equal(a[k], b[k]) for k in a.files)


def test_different_seeds_differ(tmp_path) -> None:
    with off_cluster(tmp_path / "a", max_length=20) as core:
        one = digits.train(core)
    with off_cluster(tmp_path / "b", max_length=20, trial_seed=12) as core:
        two = digits.train(core)
    assert not np.array_equal(one.params["w1"], two.params["w1"])


@pytest.mark.parametrize(
    "change",
    [
        {"hidden_size": 0},
        {"learning_rate": -1.0},
        {"activation": "sigmoid"},
        {"optimizer": {"momentum": 1.5}},
        {"batch_size": 100000},
    ],
)
def test_invalid_hparams_exit_early(tmp_path, change: dict[str, Any]) -> None:
    with off_cluster(tmp_path, hparams={**HPARAMS, **change}) as core:
        result = digits.train(core)
    assert result.status == "invalid_hp"
    assert not (tmp_path / "ckpt").exists()


def test_on_a_fake_cluster(tmp_path) -> None:
    """The whole contract: metrics, progress, checkpoints, a preemption and an early exit."""
    calls: list[tuple[str, Any]] = []
    preempt_after = {"polls": 10**9}

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        path = request.url.path
        if path.endswith("/signals/preemption"):
            preempt_after["polls"] -= 1
            return httpx.Response(200, json={"preempt": preempt_after["polls"] < 0})
        calls.append((path, body))
        return httpx.Response(200, json={})

    info = TrialInfo.from_dict(
        {
            "master_url": "http://master:8080",
            "experiment_id": 2,
            "trial_id": 9,
            "trial_run_id": 1,
            "trial_seed": 3,
            "hparams": HPARAMS,
            "max_length": {"batches": 80},
            "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path / "c")},
        }
    )
    with harness.core.init(info=info, transport=httpx.MockTransport(handler)) as core:
        result = digits.train(core)
    assert result.status == "completed"
    reports = [r for p, b in calls if p.endswith("/metrics/batch") for r in b["reports"]]
    validations = [r["metrics"] for r in reports if r["group"] == "validation"]
    assert [v["stepsCompleted"] for v in validations] == [40, 80]
    assert set(validations[-1]["metrics"]["avgMetrics"]) == {"validation_loss", "accuracy"}
    training = [r["metrics"]["stepsCompleted"] for r in reports if r["group"] == "training"]
    assert training == list(range(10, 81, 10))
    checkpoints = [b for p, b in calls if p == "/api/v1/checkpoints"]
    assert [c["metadata"]["steps_completed"] for c in checkpoints] == [40, 80]
    assert set(checkpoints[0]["resources"]) == {"metadata.json", "state.json", "weights.npz"}
    progress = [b for p, b in calls if p.endswith("/progress")]
    assert progress and progress[-1] == 1.0

    # A preemption: the trial checkpoints where it is and stops; the ack is sent once.
    calls.clear()
    preempt_after["polls"] = 0
    resumed = TrialInfo.from_dict(
        {**_as_dict(info), "trial_run_id": 2, "latest_checkpoint": checkpoints[0]["uuid"]}
    )
    with harness.core.init(info=resumed, transport=httpx.MockTransport(handler)) as core:
        assert _wait(core.preempt.should_preempt)
        result = digits.train(core)
    assert result.status == "preempted" and result.steps_completed == 41
    assert [b["metadata"]["steps_completed"] for p, b in calls if p == "/api/v1/checkpoints"] == [
        41
    ]
    assert sum(p.endswith("/ack_preemption") for p, _ in calls) == 1

    # Invalid hyperparameters are reported as an early exit.
    calls.clear()
    bad = TrialInfo.from_dict({**_as_dict(info), "hparams": {**HPARAMS, "hidden_size": 0}})
    with harness.core.init(info=bad, transport=httpx.MockTransport(handler)) as core:
        assert digits.train(core).status == "invalid_hp"
    assert [b for p, b in calls if p.endswith("/early_exit")] == [
        {"earlyExit": {"reason": "EXITED_REASON_INVALID_HP"}}
    ]


def _as_dict(info: TrialInfo) -> dict[str, Any]:
    return {
        "master_url": info.master_url,
        "experiment_id": info.experiment_id,
        "trial_id": info.trial_id,
        "trial_run_id": info.trial_run_id,
        "trial_seed": info.trial_seed,
        "hparams": info.hparams,
        "max_length": {info.length_unit: info.max_length},
        "checkpoint_storage": info.checkpoint_storage,
    }


def _wait(predicate: Any, timeout: float = 3.0) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not predicate():
        time.sleep(0.005)
    return bool(predicate())


@pytest.mark.parametrize("name", ["single.yaml", "grid.yaml", "random.yaml"])
def test_configs(name: str) -> None:
    config = yaml.safe_load((EXAMPLE / name).read_text())
    assert config["entrypoint"] == "python3 train.py"
    assert config["searcher"]["metric"] == "validation_loss"
    assert config["searcher"]["max_length"] == {"batches": 300}
    hp = config["hyperparameters"]
    assert set(hp) >= {"learning_rate", "hidden_size", "activation", "batch_size", "optimizer"}
    if name == "grid.yaml":
        counts = [v.get("count", 1) for v in hp.values() if isinstance(v, dict) and "type" in v]
        assert 6 <= np.prod(counts) <= 8
    if name == "random.yaml":
        assert config["searcher"]["max_trials"] == 6


def test_the_single_config_hparams_train(tmp_path) -> None:
    hparams = yaml.safe_load((EXAMPLE / "single.yaml").read_text())["hyperparameters"]
    with harness.core.init(hparams=hparams, checkpoint_dir=tmp_path, max_length=30) as core:
        assert digits.train(core).status == "completed"


def test_epochalignore() -> None:
    lines = (EXAMPLE / ".epochalignore").read_text().split()
    assert "__pycache__/" in lines and "*.pyc" in lines
