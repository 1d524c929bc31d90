"""`merge_under`: how a config template fills in an experiment config (the config wins)."""

from __future__ import annotations

from api.errors import unserved_feature
from services.templates import merge_under


def test_the_config_wins_and_the_template_fills_in() -> None:
    template = {"description": "t", "labels": ["a"], "resources": {"slots_per_trial": 2,
                                                                   "priority": 7}}
    config = {"labels": ["b"], "resources": {"priority": 3}}
    assert merge_under(config, template) == {
        "description": "t", "labels": ["b"], "resources": {"slots_per_trial": 2, "priority": 3}}
    assert template["resources"] == {"slots_per_trial": 2, "priority": 7}  # left as it was


def test_hyperparameters_are_taken_whole_per_name() -> None:
    template = {"hyperparameters": {"lr": {"type": "double", "minval": 0.1, "maxval": 1},
                                    "layers": 3}}
    config = {"hyperparameters": {"lr": 0.5}}
    assert merge_under(config, template)["hyperparameters"] == {"lr": 0.5, "layers": 3}


def test_a_different_searcher_is_not_mixed_with_the_templates() -> None:
    template = {"searcher": {"name": "adaptive_asha", "metric": "loss", "max_trials": 16}}
    assert merge_under({"searcher": {"name": "single", "metric": "acc"}}, template)[
        "searcher"] == {"name": "single", "metric": "acc"}
    assert merge_under({"searcher": {"max_trials": 4}}, template)["searcher"] == {
        "name": "adaptive_asha", "metric": "loss", "max_trials": 4}


def test_bind_mounts_add_the_templates_for_other_paths() -> None:
    template = {"bind_mounts": [{"host_path": "/data", "container_path": "/data"},
                                {"host_path": "/t", "container_path": "/out"}]}
    config = {"bind_mounts": [{"host_path": "/mine", "container_path": "/out"}]}
    assert merge_under(config, template)["bind_mounts"] == [
        {"host_path": "/mine", "container_path": "/out"},
        {"host_path": "/data", "container_path": "/data"}]


def test_unserved_routes_name_their_feature() -> None:
    assert unserved_feature("/api/v1/webhooks") == "webhooks are not served by Epochal"
    assert unserved_feature("/api/v1/users/setting").startswith("user web settings")
    assert unserved_feature("/api/v1/experiments/3/preview_gc") == (
        "experiments/{id}/preview_gc is not served by Epochal")
    assert unserved_feature("/api/v1/whatever") == "/api/v1/whatever is not served by Epochal"
    assert unserved_feature("/api/v1/workspaces/1", "PUT") == (
        "PUT /api/v1/workspaces/1 is not served by Epochal")
