"""Schemathesis hooks (`SCHEMATHESIS_HOOKS`) that send every generated case as several callers.

Generating the cases costs schemathesis more CPU than the master spends answering them, and the
four passes of test_api_fuzz.py asked for the same cases (one seed: an operation's cases do not
depend on which other operations run). So one run generates them once. The run's own request
goes to its URL, the master of the first caller, as the first caller there whose selection holds
the operation (`before_call` sets its token), or with no valid token where none there holds it
(an extra request that changes nothing); the check below sends the case again to each other
caller that holds it, at that caller's master. Each master thus receives the requests, in the
same order, that its own pass sent it before.

The callers come from the JSON file named by `EPOCHAL_FUZZ_CALLERS`: a list of `name`, `url`,
`token`, and `include`/`exclude` regexes over "METHOD /path"; the first caller's url must be
the run's. What each caller sent and every 5xx it got are written at exit to the file named by
`EPOCHAL_FUZZ_RESULTS`.
"""

from __future__ import annotations

import atexit
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

import schemathesis

REQUEST_TIMEOUT = 30.0
NO_TOKEN = "not-a-token"  # the run's own request where no caller at its master holds the operation


@dataclass
class Caller:
    name: str
    url: str
    token: str
    include: re.Pattern[str] | None
    exclude: re.Pattern[str] | None
    operations: set[str] = field(default_factory=set)
    requests: int = 0
    server_errors: list[str] = field(default_factory=list)

    def holds(self, operation: str) -> bool:
        return ((self.include is None or self.include.search(operation) is not None)
                and (self.exclude is None or self.exclude.search(operation) is None))

    def record(self, operation: str, status: int) -> None:
        self.operations.add(operation)
        self.requests += 1
        if status >= 500:
            self.server_errors.append(f"{operation} answered {status}")


def _load() -> list[Caller]:
    with open(os.environ["EPOCHAL_FUZZ_CALLERS"]) as file:
        entries = json.load(file)
    return [Caller(entry["name"], entry["url"].rstrip("/"), entry["token"],
                   re.compile(entry["include"]) if entry.get("include") else None,
                   re.compile(entry["exclude"]) if entry.get("exclude") else None)
            for entry in entries]


CALLERS = _load()


def _name(case: Any) -> str:
    return f"{case.operation.method.upper()} {case.operation.path}"


def _callers_of(operation: str) -> tuple[Caller | None, list[Caller]]:
    """Who sends the run's own request for `operation` (None: nobody at the run's master),
    and who is sent it again."""
    held = [caller for caller in CALLERS if caller.holds(operation)]
    assert held, f"no caller holds {operation}: the run's selection is wider than its callers'"
    first = next((caller for caller in held if caller.url == CALLERS[0].url), None)
    return first, [caller for caller in held if caller is not first]


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    """The run's own request goes out as its caller (the token replaces any Authorization the
    case was generated with, as `--header` did)."""
    first, _ = _callers_of(_name(case))
    token = first.token if first is not None else NO_TOKEN
    case.headers = {**(case.headers or {}), "Authorization": f"Bearer {token}"}


@schemathesis.check
def no_caller_gets_a_server_error(context: Any, response: Any, case: Any) -> bool | None:
    operation = _name(case)
    first, others = _callers_of(operation)
    if first is not None:
        first.record(operation, response.status_code)
    failures = []
    for caller in others:
        answer = case.call(base_url=caller.url, timeout=REQUEST_TIMEOUT,
                           headers={"Authorization": f"Bearer {caller.token}"})
        caller.record(operation, answer.status_code)
        if answer.status_code >= 500:
            failures.append(f"as {caller.name}: {answer.status_code} {answer.text[:500]}")
    if failures:
        raise AssertionError("; ".join(failures))
    return None


@atexit.register
def _write_results() -> None:
    with open(os.environ["EPOCHAL_FUZZ_RESULTS"], "w") as file:
        json.dump({caller.name: {"operations": sorted(caller.operations),
                                 "requests": caller.requests,
                                 "server_errors": caller.server_errors}
                   for caller in CALLERS}, file, indent=1)
