"""``init()`` and ``Context``: how training code gets its parts."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import httpx

from harness.core import _info
from harness.core._checkpoint import CheckpointContext
from harness.core._distributed import DistributedContext, single
from harness.core._info import LengthUnit, TrialInfo
from harness.core._preempt import PreemptContext
from harness.core._session import Session
from harness.core._train import TrainContext

logger = logging.getLogger("harness.core")


class Context:
    """The parts of the Core API, as a plain composition. Get one from ``init()``.

    Threads start in ``__enter__``; ``__exit__`` delivers every metric (waiting for the master
    however long it is away, unless ``close_timeout`` says otherwise) and stops them.
    """

    def __init__(
        self,
        *,
        info: TrialInfo,
        train: TrainContext,
        checkpoint: CheckpointContext,
        preempt: PreemptContext,
        distributed: DistributedContext | None = None,
        session: Session | None = None,
        owns_session: bool = True,
    ) -> None:
        self.info = info
        self.train = train
        self.checkpoint = checkpoint
        self.preempt = preempt
        self.distributed = distributed or single()
        self._session = session
        self._owns_session = owns_session
        self._state = "new"

    @property
    def on_cluster(self) -> bool:
        return self._session is not None

    def start(self) -> Context:
        if self._state != "new":
            raise RuntimeError("a core Context can be entered only once; call init() again")
        self._state = "started"
        self.train._start()
        self.preempt._start()
        return self

    def close(self) -> None:
        """Deliver every metric (see ``init``'s ``close_timeout``), stop the background threads.

        Raises the master's refusal of a metric report, if there was one.
        """
        self._close(raise_errors=True)

    def _close(self, *, raise_errors: bool) -> None:
        if self._state == "closed":
            return
        self._state = "closed"
        self.preempt._close()
        self.checkpoint._close()
        try:
            self.train._close(raise_errors=raise_errors)
        finally:
            self.distributed.close()
            if self._session is not None and self._owns_session:
                self._session.close()

    def __enter__(self) -> Context:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Do not hide the user's exception behind a metrics error.
        self._close(raise_errors=exc_type is None)


def init(
    *,
    info: TrialInfo | None = None,
    transport: httpx.BaseTransport | None = None,
    session: Session | None = None,
    hparams: Mapping[str, Any] | None = None,
    checkpoint_dir: str | os.PathLike[str] | None = None,
    max_length: int = 100,
    length_unit: LengthUnit = "batches",
    latest_checkpoint: str | None = None,
    trial_seed: int = 0,
    close_timeout: float | None = None,
    distributed: DistributedContext | None = None,
) -> Context:
    """Build the Core API context: ``with harness.core.init() as core: ...``.

    On the cluster the trial info comes from ``EPOCHAL_TRIAL_INFO`` (or ``info=``) and the
    off-cluster keywords below are ignored. Off-cluster (no trial info) metrics are logged,
    checkpoints go to ``checkpoint_dir`` (default ``./checkpoints``), ``should_preempt()`` is
    always False and the info is built from ``hparams``, ``max_length``/``length_unit``,
    ``latest_checkpoint`` and ``trial_seed``.

    ``transport`` (e.g. ``httpx.MockTransport``) or a ready ``session`` replace the connection
    to the master, for tests. Leaving the block waits until the master has every metric, however
    long it is away (the run is not over before); ``close_timeout`` (seconds) bounds that wait,
    and metrics still undelivered then are lost, loudly.

    ``distributed`` places this process in a trial of several (see ``DistributedContext``); on
    the cluster, a process started by ``harness.launch.torch_distributed`` gets its context
    without asking. Only the chief (rank 0) reports metrics; a checkpoint is stored by the
    chief, or by every rank with ``store_path(..., shard=True)``.
    """
    if info is None:
        info = _info.from_environment()
    if info is None or not info.on_cluster:
        if session is not None or transport is not None:
            raise ValueError("transport= and session= need cluster trial info (info= or env)")
        if info is None:
            info = TrialInfo.off_cluster(
                hparams=hparams,
                max_length=max_length,
                length_unit=length_unit,
                latest_checkpoint=latest_checkpoint,
                trial_seed=trial_seed,
                checkpoint_dir=checkpoint_dir if checkpoint_dir is not None else "checkpoints",
            )
        logger.info(
            "no trial info (%s is not set): running off-cluster, checkpoints in %s",
            _info.TRIAL_INFO_ENV, info.checkpoint_storage["host_path"],
        )
        return Context(
            info=info,
            train=TrainContext(info, None, distributed=distributed),
            checkpoint=CheckpointContext(info, None),
            preempt=PreemptContext(None, info.allocation_id),
            distributed=distributed,
        )

    if hparams is not None or checkpoint_dir is not None or latest_checkpoint is not None:
        logger.debug("on the cluster: ignoring the off-cluster keywords given to init()")
    if session is not None and transport is not None:
        raise ValueError("pass transport= or session=, not both")
    if distributed is None:
        distributed = (DistributedContext.from_torch_distributed(info)
                       if _info.torch_distributed_environment() is not None else single())
    if not distributed.is_chief:  # only the chief talks to the master
        return Context(
            info=info,
            train=TrainContext(info, None, quiet=True, distributed=distributed),
            checkpoint=CheckpointContext(info, None, distributed=distributed),
            preempt=PreemptContext(None, info.allocation_id, distributed=distributed),
            distributed=distributed,
        )
    owns_session = session is None
    if session is None:
        assert info.master_url is not None
        session = Session(info.master_url, token=info.session_token, transport=transport)
    preempt = PreemptContext(session, info.allocation_id, distributed=distributed)
    # A validation report's answer may carry the searcher's stop: should_preempt() is then
    # true at once, not when the preemption poll hears of it.
    train = TrainContext(info, session, close_timeout=close_timeout,
                         distributed=distributed, on_stop=preempt._stop_requested)
    try:
        checkpoint = CheckpointContext(info, session, distributed=distributed,
                                       before_report=train._store_reported)
    except Exception:
        if owns_session:
            session.close()
        raise
    return Context(
        info=info,
        train=train,
        checkpoint=checkpoint,
        preempt=preempt,
        distributed=distributed,
        session=session,
        owns_session=owns_session,
    )
