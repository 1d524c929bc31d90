"""The states of experiments and trials, as stored and shown (Determined's, without `STATE_`)."""

from __future__ import annotations

# Nothing runs or will run again in these (an ended experiment may be continued as new runs).
TERMINAL_STATES = frozenset({"COMPLETED", "CANCELED", "ERROR", "DELETED"})
