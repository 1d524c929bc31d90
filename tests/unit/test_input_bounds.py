"""Bounded input: configs the master parses, and login attempts.

A config's YAML is refused past its size, nesting or expanded value count ("billion laughs"),
and a search past its hyperparameter or trial count, each with a message naming the bound;
failed logins are throttled per name and address, and an unknown name costs the same password
check as a wrong password.
"""

from __future__ import annotations

from typing import Any

import pytest

from api import auth
from common.expconf import (
    MAX_CONFIG_BYTES,
    MAX_CONFIG_DEPTH,
    ConfigError,
    parse_experiment_config,
)

VALID = "name: x\nentrypoint: python3 train.py\nsearcher: {name: single, metric: loss}\n"


def billion_laughs() -> str:
    """Nine levels of ten aliases: 332 bytes that expand to a billion values."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 9):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


def refusal(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as raised:
        parse_experiment_config(text, "exp.yaml")
    return raised.value


@pytest.mark.parametrize(("text", "expected"), [
    (billion_laughs(), "more than 20,000 values once YAML aliases are expanded"),
    ("a: &a [1, *a]\n", "an alias that contains itself"),
    ("a: " + "[" * 1000 + "]" * 1000, f"nested deeper than {MAX_CONFIG_DEPTH} levels"),
    ("".join("  " * i + f"k{i}:\n" for i in range(40)), "nested deeper than 32 levels"),
    ("deep: &d " + "[" * 20 + "1" + "]" * 20 + "\nb: " + "[*d]" * 1 + "\nc: "
     + "[" * 15 + "*d" + "]" * 15, "nested deeper than 32 levels once YAML aliases"),
    (VALID + "#" * MAX_CONFIG_BYTES, f"more than the {MAX_CONFIG_BYTES:,} accepted"),
])
def test_yaml_past_a_bound_is_refused_naming_it(text: str, expected: str) -> None:
    error = refusal(text)
    assert error.summary in ("over a limit", "too large")
    assert expected in "\n".join(error.errors)


def test_a_search_past_its_bounds_is_refused_naming_them() -> None:
    many = "".join(f"  h{i}: {{type: const, val: {i}}}\n" for i in range(1001))
    error = refusal(VALID.replace("searcher: {name: single, metric: loss}",
                                  "searcher: {name: random, metric: loss, max_trials: 200000}")
                    + "hyperparameters:\n" + many)
    assert error.errors == [
        "hyperparameters: 1,001 hyperparameters, more than the 1,000 accepted",
        "searcher.max_trials: 200,000 trials, more than the 100,000 accepted",
    ]
    # Groups are not hyperparameters: a nested mapping without `type` counts its members.
    nested = (VALID + "hyperparameters:\n  optim:\n    lr: 0.1\n"
              "    momentum: {type: const, val: 0}\n")
    assert parse_experiment_config(nested).hyperparameters["optim"] is not None


def test_aliases_within_the_bounds_still_work() -> None:
    text = VALID + "hyperparameters:\n  a: &same {type: const, val: 1}\n  b: *same\n"
    assert set(parse_experiment_config(text).hyperparameters) == {"a", "b"}


def test_failed_logins_are_throttled_per_name_and_address() -> None:
    now = [1000.0]
    throttle = auth.LoginThrottle(per_user=3, per_address=5, window=60, clock=lambda: now[0])
    for _ in range(3):
        assert throttle.retry_after("admin", "10.0.0.1") is None
        throttle.failed("admin", "10.0.0.1")
    assert throttle.retry_after("admin", "10.0.0.1") == pytest.approx(60)
    assert throttle.retry_after("admin", "10.0.0.2") is None  # not locked out from elsewhere
    throttle.failed("bob", "10.0.0.1")
    throttle.failed("carol", "10.0.0.1")
    assert throttle.retry_after("dave", "10.0.0.1") is not None  # one address spraying names
    now[0] += 61
    assert throttle.retry_after("admin", "10.0.0.1") is None
    throttle.failed("admin", "10.0.0.3")
    throttle.succeeded("admin", "10.0.0.3")
    assert throttle._failures.get(("admin", "10.0.0.3")) is None


def test_the_throttle_keeps_a_bounded_number_of_counters() -> None:
    throttle = auth.LoginThrottle(max_keys=10)
    for i in range(100):
        throttle.failed(f"user{i}", f"10.0.{i}.1")
    assert len(throttle._failures) == 10


async def test_an_unknown_name_costs_a_password_check(monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[Any] = []
    real = auth._hasher

    class Counting:
        def verify(self, stored: str, password: str) -> bool:
            checked.append(stored)
            return bool(real.verify(stored, password))

    monkeypatch.setattr(auth, "_hasher", Counting())
    assert await auth.password_matches(None, "secret-password", is_hashed=False) is False
    assert checked == [auth._no_user_hash()]


def test_a_log_hyperparameter_of_base_one_is_refused() -> None:
    error = refusal(VALID + "hyperparameters:\n  optim:\n    lr: {type: log, base: 1, "
                    "minval: -4, maxval: -1}\n")
    assert error.errors == ["hyperparameters.optim.lr.base: 1 makes every value 1 (1 to any "
                            "power); use another base, such as 10"]


def test_an_infinite_log_base_or_range_end_is_refused_by_name() -> None:
    """`base: .inf` used to be taken and silently mean 10."""
    error = refusal(VALID + "hyperparameters:\n  lr: {type: log, base: .inf, minval: -4, "
                    "maxval: -1}\n  wd: {type: double, minval: -.inf, maxval: 1}\n")
    assert error.errors == [
        "hyperparameters.lr.base: must be a finite number greater than 0 and not 1, got inf",
        "hyperparameters.wd.minval: must be a finite number, got -inf"]
