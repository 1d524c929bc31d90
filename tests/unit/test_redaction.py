"""Every view of a config hides its secrets: S3 keys and credential-looking variables."""

from __future__ import annotations

import yaml

from common.expconf.redaction import REDACTED, redacted, redacted_text, secret_values

SUBMITTED = """\
name: probe   # the user's comment stays
checkpoint_storage: {type: s3, bucket: b, access_key: AKIAEXAMPLE, secret_key: "s3cr3t/Key+1"}
environment:
  environment_variables:
    - WANDB_API_KEY=wandb-0123456789
    - HF_TOKEN=hf_abcdefgh
    - LOG_LEVEL=debug
"""


def test_the_submitted_text_keeps_its_form_and_loses_its_secrets() -> None:
    shown = redacted_text(SUBMITTED)
    assert shown is not None
    for secret in ("s3cr3t/Key+1", "wandb-0123456789", "hf_abcdefgh"):
        assert secret not in shown
    assert "# the user's comment stays" in shown and "LOG_LEVEL=debug" in shown
    assert shown.count(REDACTED) == 3


def test_a_config_and_its_per_device_variables_are_redacted_without_change_to_the_stored_one(
) -> None:
    config = yaml.safe_load(SUBMITTED)
    config["environment"]["environment_variables"] = {
        "cpu": ["DB_PASSWORD=hunter22"], "cuda": ["DB_PASSWORD=hunter22", "SEED=3"]}
    shown = redacted(config)
    assert shown["checkpoint_storage"]["secret_key"] == REDACTED
    assert shown["environment"]["environment_variables"] == {
        "cpu": [f"DB_PASSWORD={REDACTED}"], "cuda": [f"DB_PASSWORD={REDACTED}", "SEED=3"]}
    assert config["checkpoint_storage"]["secret_key"] == "s3cr3t/Key+1"
    assert secret_values(config) == {"s3cr3t/Key+1", "hunter22"}


def test_a_secret_too_short_to_replace_in_place_gets_the_text_written_anew() -> None:
    shown = redacted_text("environment:\n  environment_variables: {API_KEY: q9}\nname: x\n")
    assert shown is not None and "q9" not in shown
    assert yaml.safe_load(shown)["environment"]["environment_variables"] == {"API_KEY": REDACTED}
