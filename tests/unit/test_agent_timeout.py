"""EPOCHAL_AGENT_TIMEOUT_SECONDS: read once, bounded, and named in the error when bad."""

from __future__ import annotations

import pytest

from common.agent_timeout import ENV, agent_timeout_seconds, liveness_timeout_seconds


def test_unset_leaves_the_workflows_defaults() -> None:
    assert agent_timeout_seconds({}) is None
    assert agent_timeout_seconds({ENV: " "}) is None
    assert liveness_timeout_seconds(None) is None


def test_a_set_timeout_gives_the_pool_half_of_it() -> None:
    assert agent_timeout_seconds({ENV: "12"}) == 12.0
    assert liveness_timeout_seconds(12.0) == 6.0


@pytest.mark.parametrize("text", ["soon", "0", "5.9", "3601", "nan", "-30"])
def test_a_bad_timeout_is_refused_naming_the_setting_and_the_range(text: str) -> None:
    with pytest.raises(ValueError) as err:
        agent_timeout_seconds({ENV: text})
    assert str(err.value) == f"{ENV}: expected seconds from 6 to 3600, got {text!r}"
