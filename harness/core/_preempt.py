"""Preemption signals: ``core.preempt``.

A background thread long-polls the master; ``should_preempt()`` only reads its latest answer, so
calling it every batch costs nothing. Network trouble is logged and retried: it must never crash
training.
"""

from __future__ import annotations

import logging
import threading
import time

from harness.core._distributed import DistributedContext, single
from harness.core._session import Session

logger = logging.getLogger("harness.core")


class PreemptContext:
    """Tells training code when to checkpoint and exit. Use it as ``core.preempt``.

    Off-cluster (no session) ``should_preempt()`` is always False.
    """

    def __init__(
        self,
        session: Session | None,
        allocation_id: str,
        *,
        poll_timeout: int = 60,
        retry_delay: float = 5.0,
        min_poll_interval: float = 1.0,
        distributed: DistributedContext | None = None,
    ) -> None:
        self._session = session
        self._distributed = distributed or single()
        self._allocation_id = allocation_id
        self._poll_timeout = poll_timeout
        self._retry_delay = retry_delay
        self._min_poll_interval = min_poll_interval
        self._preempt = False
        self._acked = False
        self._ack_lock = threading.Lock()
        self._quit = threading.Event()
        self._thread: threading.Thread | None = None

    def should_preempt(self) -> bool:
        """True once the master asked this trial to stop; checkpoint and exit 0 then.

        Never blocks on the network except to acknowledge, once, the first time it is True. In
        a trial of several processes every rank must call it at the same points: the chief's
        answer is given to all (so they stop at the same step).
        """
        if self._distributed.size > 1:
            answer: bool = self._distributed.broadcast(
                self._chief_should_preempt() if self._distributed.is_chief else None)
            return answer
        return self._chief_should_preempt()

    def _chief_should_preempt(self) -> bool:
        if not self._preempt:
            return False
        with self._ack_lock:
            if not self._acked:
                self._acked = True
                self._ack()
        return True

    def _stop_requested(self) -> None:
        """The master answered a validation report with its searcher's stop."""
        self._preempt = True

    def _ack(self) -> None:
        assert self._session is not None
        path = f"/api/v1/allocations/{self._allocation_id}/signals/ack_preemption"
        try:
            self._session.post(path, retries=3)
        except Exception as e:  # the exit that follows matters more than the ack
            logger.warning("could not acknowledge preemption of %s: %s", self._allocation_id, e)
        else:
            logger.info("acknowledged preemption of allocation %s", self._allocation_id)

    def _watch(self) -> None:
        assert self._session is not None
        path = f"/api/v1/allocations/{self._allocation_id}/signals/preemption"
        timeout = 0  # the first poll only asks for the current answer
        while not self._quit.is_set():
            started = time.monotonic()
            try:
                answer = self._session.get(
                    path,
                    params={"timeoutSeconds": timeout},
                    timeout=timeout + 10,
                    retries=0,
                )
            except Exception as e:
                if self._quit.is_set():
                    return
                logger.warning(
                    "preemption check failed (retrying in %.0fs): %s", self._retry_delay, e
                )
                self._quit.wait(self._retry_delay)
                continue
            if isinstance(answer, dict) and answer.get("preempt") is True:
                logger.info("the master asked allocation %s to stop", self._allocation_id)
                self._preempt = True
                return
            if timeout:
                # A master that answers a long poll at once must not make this a busy loop.
                self._quit.wait(self._min_poll_interval - (time.monotonic() - started))
            timeout = self._poll_timeout

    def _start(self) -> None:
        if self._session is None or self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._watch, name="harness-preemption-watcher", daemon=True
        )
        self._thread.start()

    def _close(self) -> None:
        # A long poll in flight cannot be interrupted; the daemon thread ends with the process
        # or when the session is closed under it.
        self._quit.set()
