"""The agent's liveness activity: it only heartbeats, on the agent's own task queue.

The resource pool starts one per registered agent. While the agent lives it heartbeats every
few seconds (heartbeats cost no workflow history); when the agent dies the heartbeat timeout
fails the activity and the pool marks the agent lost and frees its slots. It ends on its own
after `period` so the pool renews it, and an agent shutting down fails it at once.
"""

from __future__ import annotations

import asyncio
import time

from temporalio import activity
from temporalio.exceptions import ApplicationError

from common.temporal_names import AGENT_LIVENESS
from wire.pools import AgentLivenessInput

BEAT_SECONDS = 3.0
PERIOD_SECONDS = 3600.0


class Liveness:
    """The activity, and when this agent last ran one (so it knows the pool watches it)."""

    def __init__(self, agent_id: str, *, beat: float = BEAT_SECONDS,
                 period: float = PERIOD_SECONDS) -> None:
        self.agent_id = agent_id
        self.beat = beat
        self.period = period
        self.running = 0
        self.last_beat = 0.0  # time.monotonic() of the last heartbeat

    def watched(self, within: float) -> bool:
        """Whether a liveness activity ran here in the last `within` seconds."""
        return self.running > 0 or time.monotonic() - self.last_beat < within

    @activity.defn(name=AGENT_LIVENESS)
    async def agent_liveness(self, inp: AgentLivenessInput) -> None:
        self.running += 1
        deadline = time.monotonic() + self.period
        # At least four beats per heartbeat timeout, which the pool may have lowered
        # (common/agent_timeout.py), so a busy agent is not taken for a lost one.
        timeout = activity.info().heartbeat_timeout
        beat = min(self.beat, timeout.total_seconds() / 4) if timeout else self.beat
        try:
            while time.monotonic() < deadline:
                activity.heartbeat()
                self.last_beat = time.monotonic()
                await asyncio.sleep(beat)
        except asyncio.CancelledError:
            if activity.is_worker_shutdown():
                raise ApplicationError(f"agent {self.agent_id} is shutting down",
                                       type="AgentShutdown", non_retryable=True) from None
            raise
        finally:
            self.running -= 1
            self.last_beat = time.monotonic()
