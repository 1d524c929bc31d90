"""The pools' scheduling policies read from a Determined-shaped master.yaml
(providers/config.py): a pool's own `scheduler`, else `resource_manager.scheduler`, each type's
preemption as Determined decides it, and `task_container_defaults.preemption_timeout`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from providers.config import MasterConfigError, load_pool_policies
from wire.pools import PoolPolicy


def _write(tmp_path: Path, config: dict[str, object]) -> Path:
    path = tmp_path / "master.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_no_file_and_a_file_without_schedulers_leave_every_pool_to_the_defaults(
    tmp_path: Path,
) -> None:
    assert load_pool_policies(None).of("default") is None
    policies = load_pool_policies(_write(tmp_path, {"resource_pools": [{"pool_name": "a"}]}))
    assert (policies.of("a"), policies.of("other")) == (None, None)


def test_the_resource_managers_scheduler_is_every_pools_unless_the_pool_names_its_own(
    tmp_path: Path,
) -> None:
    policies = load_pool_policies(_write(tmp_path, {
        "resource_manager": {"type": "agent",
                             "scheduler": {"type": "priority", "preemption": True}},
        "resource_pools": [
            {"pool_name": "default"},
            {"pool_name": "batch", "scheduler": {"type": "priority", "preemption": False,
                                                 "backfill": False}},
        ],
        "task_container_defaults": {"preemption_timeout": "90s"},
    }))
    assert policies.of("default") == PoolPolicy(preemption=True, preemption_timeout_seconds=90)
    assert policies.of("unlisted") == PoolPolicy(preemption=True, preemption_timeout_seconds=90)
    assert policies.of("batch") == PoolPolicy(preemption=False, backfill=False,
                                              preemption_timeout_seconds=90)


@pytest.mark.parametrize(("scheduler", "preempts"), [
    ({"type": "priority"}, False),  # Determined's DefaultSchedulerConfig
    ({"type": "priority", "preemption": True}, True),
    ({"type": "fair_share"}, True),  # Determined's fair-share scheduler always preempts
    ({"type": "fair_share", "preemption": False}, True),
    ({"type": "round_robin", "preemption": True}, False),  # and round robin never
])
def test_each_scheduler_type_preempts_as_on_determined(
    tmp_path: Path, scheduler: dict[str, object], preempts: bool,
) -> None:
    policies = load_pool_policies(_write(tmp_path, {
        "resource_pools": [{"pool_name": "default", "scheduler": scheduler}]}))
    policy = policies.of("default")
    assert policy is not None and policy.preemption is preempts


def test_an_unknown_scheduler_type_is_refused_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(MasterConfigError) as refused:
        load_pool_policies(_write(tmp_path, {
            "resource_manager": {"scheduler": {"type": "lottery"}}}))
    assert "resource_manager.scheduler.type" in str(refused.value)
