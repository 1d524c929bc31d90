"""How long an agent may be silent before Epochal gives up on it (EPOCHAL_AGENT_TIMEOUT_SECONDS).

A run whose agent sent no heartbeat for this long fails and restarts elsewhere from its
checkpoint; the pool's liveness check of the agent uses half of it, so a lost agent is out of
the pool before its runs ask for slots again. Unset, the workflows keep their defaults (30 s and
15 s) and their inputs carry nothing, as before the setting existed. A test cluster lowers it so
that a killed agent's trial resumes in seconds rather than waiting out the default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

ENV = "EPOCHAL_AGENT_TIMEOUT_SECONDS"
# Runs heartbeat every 2 s and the liveness activity at least four times per timeout: below
# this a busy agent would be taken for a lost one.
LOWEST = 6.0
HIGHEST = 3600.0


def agent_timeout_seconds(env: Mapping[str, str] = os.environ) -> float | None:
    """The configured timeout, or None for the workflows' defaults; a clear error if bad."""
    text = env.get(ENV, "").strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not LOWEST <= seconds <= HIGHEST:
        raise ValueError(f"{ENV}: expected seconds from {LOWEST:g} to {HIGHEST:g}, got {text!r}")
    return seconds


def liveness_timeout_seconds(agent_timeout: float | None) -> float | None:
    """The pool's liveness heartbeat timeout for an agent timeout (None: the pool's default)."""
    return agent_timeout / 2 if agent_timeout is not None else None
