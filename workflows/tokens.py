"""Per-trial session tokens: minted by agents, verified by the master, both from the cluster token.

A trial token names its trial and carries an HMAC of it keyed by the cluster token, so an agent
can hand its trial a token without asking the master, and the master checks it without storing
it. Pure functions (no IO): shared by agent_worker and api.
"""

from __future__ import annotations

import hashlib
import hmac

TRIAL_TOKEN_PREFIX = "ept"


def _signature(cluster_token: str, trial_id: int) -> str:
    message = f"trial:{trial_id}".encode()
    return hmac.new(cluster_token.encode(), message, hashlib.sha256).hexdigest()


def mint_trial_token(cluster_token: str, trial_id: int) -> str:
    return f"{TRIAL_TOKEN_PREFIX}.{trial_id}.{_signature(cluster_token, trial_id)}"


def verify_trial_token(cluster_token: str, token: str) -> int | None:
    """The trial id a genuine trial token names, else None."""
    prefix, _, rest = token.partition(".")
    trial, _, signature = rest.partition(".")
    if prefix != TRIAL_TOKEN_PREFIX or not trial.isdigit() or len(trial) > 10:
        return None
    trial_id = int(trial)
    if not hmac.compare_digest(signature, _signature(cluster_token, trial_id)):
        return None
    return trial_id
