"""A submitted config is checked once (services/submission.py): the model and the dump it
stores come from one validation, and a detached run's config is read from its text once."""

from __future__ import annotations

import pytest

from common.expconf import config_warnings, planned_trials, validate_experiment_config
from services.errors import Invalid
from services.submission import normalized_config

STORAGE = {"type": "shared_fs", "host_path": "/tmp/checkpoints"}
CONFIG = """
name: grid
entrypoint: python3 train.py
hyperparameters:
  lr: {type: categorical, vals: [0.1, 0.01]}
searcher: {name: grid, metric: loss, max_length: {batches: 10}}
"""


def test_the_model_and_the_stored_dump_agree() -> None:
    checked = normalized_config(CONFIG, STORAGE)
    assert checked.data == checked.model.model_dump(mode="json")
    again = validate_experiment_config(checked.data)
    assert planned_trials(checked.model) == planned_trials(again) == 2
    assert config_warnings(checked.model) == config_warnings(again)
    assert checked.data["checkpoint_storage"]["host_path"] == "/tmp/checkpoints"


def test_a_detached_runs_directory_storage_is_kept_as_shared_fs_without_an_entrypoint() -> None:
    text = ("name: detached\nsearcher: {name: single, metric: loss}\n"
            "checkpoint_storage: {type: directory, container_path: /home/me/ckpts}\n")
    checked = normalized_config(text, STORAGE, storage_roots=("/tmp",), unmanaged=True)
    assert "entrypoint" not in checked.data
    assert checked.data["checkpoint_storage"]["type"] == "shared_fs"
    assert checked.data["checkpoint_storage"]["host_path"] == "/home/me/ckpts"


def test_a_managed_run_keeps_to_the_storage_roots() -> None:
    with pytest.raises(Invalid) as refused:
        normalized_config(CONFIG, {"type": "shared_fs", "host_path": "/elsewhere"},
                          storage_roots=("/tmp",))
    assert "outside the directories this cluster keeps checkpoints in" in refused.value.details[0]
