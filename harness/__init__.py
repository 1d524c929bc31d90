"""Epochal's harness: the library training code imports inside a trial.

`import harness` gives `harness.core`, as `import determined as det` gives `det.core`.

In a task environment of the user's (agent_worker/task_env.py) Epochal is not installed: only
this package is on PYTHONPATH. Its one outside need, httpx, is then the user's own when they
have it; otherwise the agent's copy is appended to the END of sys.path, so it can never shadow
a package of the user's.
"""

import importlib.util
import os
import sys

HARNESS_FALLBACK_ENV = "EPOCHAL_HARNESS_FALLBACK_PATH"


def _reach_httpx() -> None:
    fallback = os.environ.get(HARNESS_FALLBACK_ENV)
    if fallback and fallback not in sys.path and importlib.util.find_spec("httpx") is None:
        sys.path.append(fallback)


def _skip_httpx_command_line() -> None:
    """httpx imports its command line with itself (httpx._main: click, rich and pygments, when
    installed), about 60 ms of every trial's start-up; the harness never runs it, and httpx
    puts a stub in its place when it cannot be imported (as when those are not installed)."""
    if "httpx" not in sys.modules:
        sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]


_reach_httpx()
_skip_httpx_command_line()

from harness import core  # noqa: E402

__all__ = ["core"]
