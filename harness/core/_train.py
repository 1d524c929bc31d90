"""Metrics, progress and early exits: ``core.train``.

Reports are queued and a background sender posts them to ``POST /trials/{id}/metrics/batch``.
The master keys a report by (trial, group, stepsCompleted), so a batch that is retried after a
lost answer replaces what it stored instead of counting twice; the sender therefore retries
every batch, unchanged, until it is delivered, however long the master is away. Reports wait in
memory, then in a spool file on local disk (``harness.spool``), bounded by
``EPOCHAL_SPOOL_MAX_BYTES``; past the bound reporting fails with ``SpoolFull``, naming it.
"""

from __future__ import annotations

import enum
import logging
import math
import numbers
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from harness.core._distributed import DistributedContext, single
from harness.core._info import TrialInfo
from harness.core._session import APIError, MasterError, MasterUnavailable, Session
from harness.spool import SpoolQueue

logger = logging.getLogger("harness.core")

TRAINING = "training"
VALIDATION = "validation"


class EarlyExitReason(enum.Enum):
    """Why a trial stopped before its searcher length; the values are the REST API's."""

    INVALID_HP = "EXITED_REASON_INVALID_HP"
    USER_REQUESTED_STOP = "EXITED_REASON_USER_REQUESTED_STOP"


_REASON_ALIASES = {
    "invalid_hp": EarlyExitReason.INVALID_HP,
    "user_requested_stop": EarlyExitReason.USER_REQUESTED_STOP,
}


# Reports per request: MLflow's log_batch takes at most 1,000 values, i.e. 200 steps of 5 metrics;
# Epochal's batches are as large, so a fast reporter pays one request per 200 reports.
BATCH_SIZE = 200
# Reports kept in memory while the master is away; later ones go to the spool file.
MEMORY_REPORTS = 10_000
SPOOL_MAX_BYTES_ENV = "EPOCHAL_SPOOL_MAX_BYTES"
SPOOL_DIR_ENV = "EPOCHAL_SPOOL_DIR"
DEFAULT_SPOOL_MAX_BYTES = 1 << 30


class SpoolFull(MasterError):
    """The master has been away so long that the reports waiting for it reached the spool's
    bound; raised to the training code by the report that did not fit."""


def spool_max_bytes() -> int:
    """The spool's bound on disk: ``EPOCHAL_SPOOL_MAX_BYTES``, 1 GiB by default."""
    text = os.environ.get(SPOOL_MAX_BYTES_ENV, "")
    try:
        return int(text) if text else DEFAULT_SPOOL_MAX_BYTES
    except ValueError:
        raise ValueError(
            f"{SPOOL_MAX_BYTES_ENV} must be a whole number of bytes, got {text!r}") from None


class _Sender:
    """Posts queued metric reports in batches from a background thread.

    A batch goes out as soon as work waits and the previous batch left at least ``interval``
    seconds ago (so the first report is sent at once and later ones are grouped), or as soon as
    ``batch_size`` reports are waiting, or when someone flushes; it holds the oldest reports (at
    most ``batch_size``). A batch is removed
    from the queue only once the master accepted it; connection errors and 5xx are retried with
    the session's backoff for as long as it takes; a 4xx (or any other failure, which retrying
    would not cure) is kept as an error for the training thread and the batch is dropped.
    Progress is coalesced: only the newest value is sent. The queue spills to disk past
    ``memory_reports`` (``harness.spool``).
    """

    def __init__(
        self,
        session: Session,
        trial_id: int,
        *,
        interval: float = 0.5,
        batch_size: int = BATCH_SIZE,
        memory_reports: int = MEMORY_REPORTS,
        max_spool_bytes: int | None = None,
        spool_dir: str | None = None,
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        self._session = session
        self._trial_id = trial_id
        self._on_stop = on_stop
        self._interval = interval
        self._batch_size = batch_size
        self._cond = threading.Condition()
        self._pending = SpoolQueue(
            memory_items=memory_reports,
            max_bytes=spool_max_bytes() if max_spool_bytes is None else max_spool_bytes,
            directory=spool_dir or os.environ.get(SPOOL_DIR_ENV) or None,
            name=f"harness-trial-{trial_id}-metrics",
        )
        self._failing_since: float | None = None  # when delivery began to fail, if it does
        self._enqueued = 0  # reports ever queued
        self._done = 0  # reports delivered (or dropped after a 4xx)
        self._flush_to = 0  # send without waiting for the interval until _done reaches this
        self._progress: float | None = None
        self._last_send = float("-inf")  # when the previous batch left
        self._stopping = False
        self._abandoned = False
        self._errors: list[MasterError] = []
        self._thread = threading.Thread(
            target=self._run, name="harness-metrics-sender", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def put(self, report: dict[str, Any]) -> None:
        with self._cond:
            if not self._pending.put(report):
                away = time.monotonic() - (self._failing_since or time.monotonic())
                raise SpoolFull(
                    f"{len(self._pending)} metric reports are waiting for the master, which has"
                    f" not accepted any for {away:.0f}s; the spool's bound of"
                    f" {self._pending.max_bytes} bytes on disk ({SPOOL_MAX_BYTES_ENV}) is reached"
                )
            self._enqueued += 1
            # Wake the sender for the first report waiting, or for a full batch.
            if len(self._pending) in (1, self._batch_size):
                self._cond.notify_all()

    def put_progress(self, fraction: float) -> None:
        with self._cond:
            self._progress = fraction
            self._cond.notify_all()

    def take_error(self) -> MasterError | None:
        with self._cond:
            return self._errors.pop(0) if self._errors else None

    @property
    def undelivered(self) -> int:
        with self._cond:
            return self._enqueued - self._done

    def flush(self, timeout: float | None, *, what: str = "metrics") -> bool:
        """Send everything queued so far now; wait up to ``timeout`` s (None: for as long as it
        takes) for it to be delivered."""
        deadline = time.monotonic() + timeout if timeout is not None else math.inf
        next_log = time.monotonic() + 15.0
        with self._cond:
            target = self._enqueued
            self._flush_to = max(self._flush_to, target)
            self._cond.notify_all()
            while self._done < target and self._thread.is_alive():
                now = time.monotonic()
                if now >= deadline:
                    return False
                if now >= next_log:
                    logger.warning(
                        "still waiting for the master to accept %s (%d report(s) queued)",
                        what, self._enqueued - self._done,
                    )
                    next_log = now + 15.0
                self._cond.wait(min(deadline, next_log) - now)
            return self._done >= target

    def close(self, timeout: float | None) -> bool:
        """Deliver everything (metrics and the last progress) within ``timeout`` s (None: for
        as long as the master takes to come back), then stop."""
        deadline = time.monotonic() + timeout if timeout is not None else math.inf
        delivered = self.flush(timeout, what="the last metrics")
        with self._cond:
            self._stopping = True
            if not delivered:
                self._abandoned = True
            self._cond.notify_all()
        self._thread.join(max(0.1, min(deadline - time.monotonic(), 60.0)))
        if self._thread.is_alive():
            with self._cond:
                self._abandoned = True
                self._cond.notify_all()
            self._thread.join(1.0)
        with self._cond:
            self._pending.close()
        return delivered

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._abandoned:
                        return
                    waiting = len(self._pending)
                    has_work = waiting > 0 or self._progress is not None
                    elapsed = time.monotonic() - self._last_send
                    if (
                        waiting >= self._batch_size
                        or (waiting and self._flush_to > self._done)
                        or (has_work and (self._stopping or elapsed >= self._interval))
                    ):
                        break
                    if self._stopping and not has_work:
                        return
                    self._cond.wait(self._interval - elapsed if has_work else None)
                batch = self._pending.peek(min(waiting, self._batch_size))
                progress, self._progress = self._progress, None
                self._last_send = time.monotonic()
            if batch and not self._deliver(batch):
                return
            if progress is not None:
                self._send_progress(progress)

    def _deliver(self, batch: list[dict[str, Any]]) -> bool:
        """Post ``batch`` until the master takes it; False if abandoned while retrying."""
        path = f"/api/v1/trials/{self._trial_id}/metrics/batch"
        attempt = 0
        while True:
            try:
                answer = self._session.post(path, body={"reports": batch}, retries=0)
                with self._cond:
                    self._failing_since = None
                # The searcher stopped the trial on one of these validations.
                if isinstance(answer, dict) and answer.get("preempt") is True and self._on_stop:
                    self._on_stop()
                break
            except APIError as e:
                logger.error("the master refused %d metric report(s): %s", len(batch), e)
                with self._cond:
                    self._errors.append(e)
                break
            except MasterUnavailable as e:
                delay = self._session.backoff.delay(attempt)
                attempt += 1
                with self._cond:
                    self._failing_since = self._failing_since or time.monotonic()
                logger.warning(
                    "could not send %d metric report(s) (attempt %d, retrying in %.1fs): %s",
                    len(batch), attempt, delay, e,
                )
                with self._cond:
                    if self._cond.wait_for(lambda: self._abandoned, timeout=delay):
                        return False
            except Exception as e:  # a bug, not the network: retrying would not help
                logger.exception("could not send %d metric report(s)", len(batch))
                with self._cond:
                    self._errors.append(MasterError(f"could not send metrics: {e!r}"))
                break
        with self._cond:
            self._pending.drop(len(batch))
            self._done += len(batch)
            self._cond.notify_all()
        return True

    def _send_progress(self, fraction: float) -> None:
        try:
            self._session.post(
                f"/api/v1/trials/{self._trial_id}/progress", body=fraction, retries=2
            )
        except Exception as e:  # progress is advisory
            logger.warning("could not report progress %.3f: %s", fraction, e)
            with self._cond:
                if self._progress is None and not self._abandoned:
                    self._progress = fraction


class TrainContext:
    """Reports a trial's metrics, progress and early exit to the master (or the log, off-cluster).

    Use it through ``harness.core.init()``: ``core.train``.
    """

    def __init__(
        self,
        info: TrialInfo,
        session: Session | None,
        *,
        interval: float = 0.5,
        batch_size: int = BATCH_SIZE,
        validation_timeout: float = 120.0,
        close_timeout: float | None = None,
        quiet: bool = False,
        distributed: DistributedContext | None = None,
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        self._info = info
        self._session = session
        self._quiet = quiet  # a worker of a distributed trial: only the chief reports
        self._distributed = distributed or single()
        self._sender = (
            _Sender(session, info.trial_id, interval=interval, batch_size=batch_size,
                    on_stop=on_stop)
            if session is not None
            else None
        )
        self._validation_timeout = validation_timeout
        self._close_timeout = close_timeout
        self._lock = threading.Lock()
        self._last_steps: dict[str, int] = {}
        self._early_exit: EarlyExitReason | None = None
        self._state = "new"

    def report_training_metrics(self, steps_completed: int, metrics: Mapping[str, Any], *,
                                gather: bool = False) -> None:
        """Queue training metrics at ``steps_completed``; they are sent in the background.

        In a trial of several processes only the chief's are reported; with ``gather=True``
        (called by every rank at the same step) each metric is the mean over the ranks."""
        self._report(TRAINING, steps_completed, metrics, gather=gather)

    def report_validation_metrics(self, steps_completed: int, metrics: Mapping[str, Any], *,
                                  gather: bool = False) -> None:
        """Send validation metrics now and wait until the master has them (the searcher does).
        ``gather`` as for ``report_training_metrics``."""
        self._report(VALIDATION, steps_completed, metrics, gather=gather)
        if self._sender is not None:
            if not self._sender.flush(self._validation_timeout, what="validation metrics"):
                logger.error(
                    "the master has not accepted validation metrics at step %d after %.0fs; "
                    "continuing, they stay queued and are retried in the background",
                    steps_completed, self._validation_timeout,
                )
            self._raise_sender_error()

    def _store_reported(self) -> None:
        """Wait, for as long as the master takes, until every metric reported so far is stored
        (core.checkpoint calls it before it registers a checkpoint)."""
        if self._sender is not None:
            self._sender.flush(None, what="metrics reported before the checkpoint")

    def report_progress(self, fraction: float) -> None:
        """Report how much of the searcher's length is done, a number in [0, 1]."""
        self._check_started("report_progress")
        if (
            isinstance(fraction, bool)
            or not isinstance(fraction, numbers.Real)
            or not 0.0 <= float(fraction) <= 1.0
        ):
            raise ValueError(f"progress must be a number in [0, 1], got {fraction!r}")
        if self._sender is None:
            if not self._quiet:
                logger.info("progress %.3f", float(fraction))
            return
        self._raise_sender_error()
        self._sender.put_progress(float(fraction))

    def report_early_exit(self, reason: str | EarlyExitReason) -> None:
        """Tell the master the trial stops early: "invalid_hp" or "user_requested_stop".

        Call it once, then exit the script normally.
        """
        self._check_started("report_early_exit")
        parsed = _parse_reason(reason)
        with self._lock:
            if self._early_exit is not None:
                raise RuntimeError(
                    f"report_early_exit() may be called once per run; already reported "
                    f"{self._early_exit.value}"
                )
            self._early_exit = parsed
        logger.info("reporting early exit: %s", parsed.value)
        if self._session is None or self._sender is None:
            return
        self._sender.flush(self._validation_timeout, what="metrics before the early exit")
        self._session.deliver(
            f"/api/v1/trials/{self._info.trial_id}/early_exit",
            body={"earlyExit": {"reason": parsed.value}}, what="the early exit",
        )

    def _report(self, group: str, steps_completed: int, metrics: Mapping[str, Any], *,
                gather: bool = False) -> None:
        name = f"report_{group}_metrics"
        self._check_started(name)
        if isinstance(steps_completed, bool) or not isinstance(steps_completed, numbers.Integral):
            raise TypeError(
                f"{name}: steps_completed must be an int, got {type(steps_completed).__name__}"
            )
        steps = int(steps_completed)
        if steps < 0:
            raise ValueError(f"{name}: steps_completed must be >= 0, got {steps}")
        values = _clean_metrics(name, metrics)
        if gather and self._distributed.size > 1:
            gathered = self._distributed.gather(values)
            if gathered is None:
                return  # a worker: the chief reports the mean
            values = _mean_over_ranks(gathered)
        with self._lock:
            last = self._last_steps.get(group)
            if last is not None and steps < last:
                raise ValueError(
                    f"{name}: steps_completed must not decrease: got {steps} after {last}"
                )
            self._last_steps[group] = steps
        if self._sender is None:
            if not self._quiet:
                logger.info("%s metrics at step %d: %s", group, steps, values)
            return
        self._raise_sender_error()
        self._sender.put(
            {
                "group": group,
                "metrics": {
                    "trialId": self._info.trial_id,
                    "trialRunId": self._info.trial_run_id,
                    "stepsCompleted": steps,
                    "metrics": {"avgMetrics": values},
                },
            }
        )

    def _check_started(self, what: str) -> None:
        if self._state == "new":
            raise RuntimeError(
                f"{what}() called before the context was entered: "
                "use `with harness.core.init() as core:`"
            )
        if self._state == "closed":
            raise RuntimeError(f"{what}() called after the core context was closed")

    def _raise_sender_error(self) -> None:
        if self._sender is not None and (error := self._sender.take_error()) is not None:
            raise error

    def _start(self) -> None:
        self._state = "started"
        if self._sender is not None:
            self._sender.start()

    def _close(self, *, raise_errors: bool) -> None:
        if self._state != "started":
            self._state = "closed"
            return
        self._state = "closed"
        if self._sender is None:
            return
        if not self._sender.close(self._close_timeout):
            logger.error(
                "THE MASTER NEVER ACCEPTED %d METRIC REPORT(S) of trial %d within %.0fs "
                "(close_timeout); they are lost",
                self._sender.undelivered, self._info.trial_id, self._close_timeout or 0,
            )
        if raise_errors:
            self._raise_sender_error()


def _parse_reason(reason: str | EarlyExitReason) -> EarlyExitReason:
    if isinstance(reason, EarlyExitReason):
        return reason
    if isinstance(reason, str):
        if reason.lower() in _REASON_ALIASES:
            return _REASON_ALIASES[reason.lower()]
        for member in EarlyExitReason:
            if reason == member.value:
                return member
    allowed = ", ".join(repr(a) for a in _REASON_ALIASES)
    raise ValueError(f"early exit reason must be one of {allowed}; got {reason!r}")


def _mean_over_ranks(
    reports: list[dict[str, int | float | None]],
) -> dict[str, int | float | None]:
    """Each metric's mean over the ranks that reported a number for it (None if none did)."""
    names = dict.fromkeys(name for report in reports for name in report)
    means: dict[str, int | float | None] = {}
    for name in names:
        numbers_ = [v for report in reports if (v := report.get(name)) is not None]
        means[name] = sum(numbers_) / len(numbers_) if numbers_ else None
    return means


def _clean_metrics(where: str, metrics: Mapping[str, Any]) -> dict[str, int | float | None]:
    """Check ``metrics`` is a dict of name -> number; NaN and infinities become None (null)."""
    if not isinstance(metrics, Mapping):
        raise TypeError(
            f"{where}: metrics must be a dict of metric name to number, "
            f"got {type(metrics).__name__}"
        )
    clean: dict[str, int | float | None] = {}
    for key, value in metrics.items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"{where}: metric names must be non-empty strings, got {key!r}")
        if type(value) is float:  # the common case, without the costlier ABC checks below
            clean[key] = value if math.isfinite(value) else None
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(
                f"{where}: metrics must be a dict of numbers; {key!r} is "
                f"{type(value).__name__} ({value!r})"
            )
        if isinstance(value, numbers.Integral):
            clean[key] = int(value)
        else:
            number = float(value)
            clean[key] = number if math.isfinite(number) else None
    return clean
