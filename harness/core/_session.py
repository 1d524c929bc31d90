"""The harness's HTTP client to the master.

Errors, written out once:

- ``MasterError``: base of every error the harness raises about talking to the master.
  - ``APIError``: the master answered 4xx. The request was understood and refused (unknown id,
    bad input, wrong state); retrying would not help. Carries the server's ``message`` and
    ``details``.
  - ``MasterUnavailable``: the master could not be reached or answered 5xx, on every attempt.

Connection errors and 5xx answers are retried with exponential backoff; every request the harness
makes is safe to repeat (metrics are keyed by step, checkpoints by uuid, the rest are idempotent).
"""

from __future__ import annotations

import logging
import os
import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

logger = logging.getLogger("harness.core")
_TRACEPARENT = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
# httpx logs every request at INFO; in a training script's logs (shipped to the master) that is
# one line per metric batch and preemption poll. The harness reports its own failures instead.
logging.getLogger("httpx").setLevel(logging.WARNING)


class MasterError(Exception):
    """Base class of the harness's errors about the master."""


class APIError(MasterError):
    """The master refused a request with a 4xx status; the message is the server's."""

    def __init__(
        self, method: str, path: str, status_code: int, message: str, details: list[str]
    ) -> None:
        self.method = method
        self.path = path
        self.status_code = status_code
        self.message = message
        self.details = details
        text = f"{method} {path} failed with {status_code}: {message}"
        if details:
            text += " (" + "; ".join(details) + ")"
        super().__init__(text)


class MasterUnavailable(MasterError):
    """The master did not answer, or answered 5xx, on every attempt."""


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter: ``initial * factor**attempt``, capped at ``maximum``."""

    initial: float = 0.5
    maximum: float = 10.0
    factor: float = 2.0
    jitter: float = 0.1

    def delay(self, attempt: int) -> float:
        base = min(self.maximum, self.initial * self.factor ** min(attempt, 30))
        return base * (1.0 + random.uniform(-self.jitter, self.jitter))


class Session:
    """An ``httpx.Client`` bound to the master, with retries on connection errors and 5xx.

    Thread-safe: the metrics sender, the preemption watcher and the training thread share one.
    ``transport`` is httpx's seam for tests (``httpx.MockTransport``).
    """

    def __init__(
        self,
        master_url: str,
        *,
        token: str | None = None,
        transport: httpx.BaseTransport | None = None,
        retries: int = 8,
        backoff: Backoff | None = None,
        timeout: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # The agent's run_trial span (W3C trace context): the master's spans of these reports
        # join the trial's trace. Only a well-formed value is passed on.
        parent = os.environ.get("TRACEPARENT", "")
        if _TRACEPARENT.fullmatch(parent):
            headers["traceparent"] = parent
        self.master_url = master_url.rstrip("/")
        self.retries = retries
        self.backoff = backoff or Backoff()
        self._sleep = sleep
        # Certificates are loaded only for an https master (loading them is a sixth of a
        # trial's start-up); a plain-http master never takes the client to TLS.
        self._client = httpx.Client(
            base_url=self.master_url, headers=headers, transport=transport, timeout=timeout,
            verify=self.master_url.startswith("https://"),
        )

    def get(
        self,
        path: str,
        *,
        params: Mapping[str, str | int] | None = None,
        timeout: float | None = None,
        retries: int | None = None,
    ) -> Any:
        return self.request("GET", path, params=params, timeout=timeout, retries=retries)

    def post(
        self,
        path: str,
        *,
        body: Any = None,
        timeout: float | None = None,
        retries: int | None = None,
    ) -> Any:
        return self.request("POST", path, body=body, timeout=timeout, retries=retries)

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str | int] | None = None,
        timeout: float | None = None,
        retries: int | None = None,
    ) -> Any:
        """Send one request and return the decoded JSON answer (``None`` for an empty body).

        ``retries`` overrides the session's count; 0 means a single attempt.
        """
        attempts = 1 + (self.retries if retries is None else retries)
        extra: dict[str, Any] = {}
        if timeout is not None:
            extra["timeout"] = timeout
        last = ""
        for attempt in range(attempts):
            if attempt:
                self._sleep(self.backoff.delay(attempt - 1))
            try:
                response = self._client.request(
                    method,
                    path,
                    json=body,
                    params=dict(params) if params else None,
                    **extra,
                )
            except httpx.TransportError as e:
                last = f"{type(e).__name__}: {e}"
            else:
                if response.status_code < 400:
                    return response.json() if response.content else None
                if response.status_code < 500:
                    raise _api_error(method, path, response)
                last = f"status {response.status_code}: {_message(response)}"
            if attempt + 1 < attempts:
                logger.warning(
                    "%s %s to %s failed (%s); retry %d of %d",
                    method, path, self.master_url, last, attempt + 1, attempts - 1,
                )
        raise MasterUnavailable(
            f"{method} {path} to {self.master_url} failed after {attempts} attempt(s): {last}"
        )

    def deliver(self, path: str, *, body: Any = None, what: str) -> Any:
        """POST until the master takes it, however long it is away: connection errors and 5xx
        are retried with the backoff and no limit (a warning each time says for how long); a
        refusal (4xx) raises ``APIError``. For reports that must not be lost (checkpoints)."""
        started = time.monotonic()
        attempt = 0
        while True:
            try:
                return self.request("POST", path, body=body, retries=0)
            except MasterUnavailable as e:
                delay = self.backoff.delay(attempt)
                attempt += 1
                logger.warning(
                    "could not send %s for %.0fs (attempt %d, retrying in %.1fs; it is sent when"
                    " the master is back): %s",
                    what, time.monotonic() - started, attempt, delay, e,
                )
                self._sleep(delay)

    def close(self) -> None:
        self._client.close()


def _message(response: httpx.Response) -> str:
    try:
        payload = response.json()
    except ValueError:
        return response.text[:500] or response.reason_phrase
    message = payload.get("message") if isinstance(payload, dict) else None
    return message if isinstance(message, str) else response.text[:500]


def _api_error(method: str, path: str, response: httpx.Response) -> APIError:
    details: list[str] = []
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if isinstance(payload, dict) and isinstance(payload.get("details"), list):
        details = [str(d) for d in payload["details"]]
    return APIError(method, path, response.status_code, _message(response), details)
