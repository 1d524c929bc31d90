"""Per-run session tokens: minted by agents, verified by the master, both from the cluster token.

A trial token names its trial and the run it was minted for, and carries an HMAC of both keyed
by the cluster token, so an agent can hand its run a token without asking the master, and the
master checks it without storing it. The master honours it only while that run is the trial's
current one and is running (api/auth.py): a finished run's token, or an orphaned process of an
earlier run, is refused. Pure functions (no IO): shared by agent_worker and api.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import NamedTuple

TRIAL_TOKEN_PREFIX = "ept"


class TrialRun(NamedTuple):
    trial_id: int
    run_id: int


def _signature(cluster_token: str, trial_id: int, run_id: int) -> str:
    message = f"trial:{trial_id}:run:{run_id}".encode()
    return hmac.new(cluster_token.encode(), message, hashlib.sha256).hexdigest()


def mint_trial_token(cluster_token: str, trial_id: int, run_id: int) -> str:
    return (f"{TRIAL_TOKEN_PREFIX}.{trial_id}.{run_id}."
            f"{_signature(cluster_token, trial_id, run_id)}")


def verify_trial_token(cluster_token: str, token: str) -> TrialRun | None:
    """The trial and run a genuine trial token names, else None."""
    parts = token.split(".")
    if len(parts) != 4 or parts[0] != TRIAL_TOKEN_PREFIX:
        return None
    _, trial, run, signature = parts
    if not (trial.isdigit() and run.isdigit() and len(trial) <= 10 and len(run) <= 10):
        return None
    named = TrialRun(int(trial), int(run))
    if not hmac.compare_digest(signature, _signature(cluster_token, *named)):
        return None
    return named
