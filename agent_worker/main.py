"""The agent process: register with the master, then run trials from Temporal until told to stop.

    python -m agent_worker --master URL --temporal ADDRESS [--namespace default] --pool default \
        [--slots N] --work-dir DIR [--agent-id ID] [--runtime process|docker|auto] \
        [--image-pull missing|always|never] [--task-env DIR] [--task-user NAME] \
        [--hide-from-trials DIR ...]

It registers with the master (which tells the pool's scheduler, `ResourcePoolWorkflow`), then
polls only its own task queue `agent.<agentId>`: the runs the scheduler placed on it
(`run_trial`) and its liveness activity (`agent_liveness`). Every start is a new boot id; an
agent the pool stopped watching (it was declared lost) registers again under a new one. SIGTERM
or SIGINT stops polling, stops the running trials (their whole process groups) and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import httpx
from temporalio.client import Client
from temporalio.worker import Worker

from agent_worker.liveness import Liveness
from agent_worker.process_runtime import ProcessRuntime
from agent_worker.registration import Registration, host_addresses, route_address
from agent_worker.run_cgroups import RunCgroups
from agent_worker.runtime import Runtime
from agent_worker.sandbox import (
    RUN_ID_RANGE,
    TASK_USER_ENV,
    TaskUser,
    TaskUserError,
    container_user_for_agent,
    task_user_for_agent,
)
from agent_worker.slots import Slot, SlotPool, discover_slots
from agent_worker.task_env import HarnessPath, TaskEnvError, TaskEnvironment, task_env_from_environ
from agent_worker.task_runs import TaskActivities
from agent_worker.trial_firewall import TrialFirewall, listeners
from agent_worker.trial_runs import LOG_CLOSE_TIMEOUT, SYSTEM_METRICS_INTERVAL, AgentActivities
from common import payload_codec, tracing
from common.temporal_connection import TemporalConnectionError, TemporalSecurity, connect
from common.temporal_names import DEFAULT_NAMESPACE, DEFAULT_RESOURCE_POOL, agent_task_queue

logger = logging.getLogger("agent_worker")

T = TypeVar("T")

HEARTBEAT_THROTTLE_SECONDS = 2.0
# Registered but no liveness activity for this long: the pool lost us; register again
# (`--rejoin-after`).
UNWATCHED_SECONDS = 60.0
# How soon a port a run listens on (beyond those it was given) is closed to other users' runs.
LISTENER_SCAN_SECONDS = 0.5
RUNTIMES = ("process", "docker", "auto")
CLUSTER_TOKEN_ENV = "EPOCHAL_CLUSTER_TOKEN"
SHARE_ENV = "EPOCHAL_SHARE_WITH_TRIALS"  # --share-with-trials, os.pathsep-separated
LOG_CLOSE_TIMEOUT_ENV = "EPOCHAL_LOG_CLOSE_TIMEOUT_SECONDS"  # --log-close-timeout
REJOIN_ENV = "EPOCHAL_AGENT_REJOIN_SECONDS"  # --rejoin-after


@dataclass
class AgentConfig:
    master_url: str
    temporal_address: str
    work_dir: Path
    agent_id: str
    namespace: str = DEFAULT_NAMESPACE
    resource_pool: str = DEFAULT_RESOURCE_POOL
    slots: int | None = None  # CPU slots; None: one per CPU
    runtime: str = "process"  # process | docker | auto (docker where an engine answers)
    image_pull: str = "missing"  # Docker runtime: missing | always | never
    # Sent to the master on every call; trial tokens are signed with it (common/tokens.py).
    cluster_token: str | None = None
    # TLS and credentials for a Temporal that authenticates clients (EPOCHAL_TEMPORAL_TLS_*).
    temporal_security: TemporalSecurity = field(default_factory=TemporalSecurity)
    # Process runtime: the user's Python environment trials run in (agent_worker/task_env.py).
    task_env: TaskEnvironment | None = None
    # Process runtime: the user trials run as, sandboxed (agent_worker/sandbox.py); None: the
    # agent's own, unsandboxed. The command line's default is `nobody` for a root agent.
    task_user: TaskUser | None = None
    # --task-user as given: the Docker runtime's containers run as that user, never root
    # (sandbox.container_user_for_agent; None: 65534:65534 for a root agent).
    task_user_name: str | None = None
    # Process runtime, with a task user: directories trials must not see, besides the work dir
    # and the agent user's home (the local cluster's state directory, say).
    hidden_from_trials: tuple[Path, ...] = ()
    # With a task user: directories trials see even where they would be hidden (under /tmp,
    # which is each run's own, say): a shared Python environment, datasets.
    shared_with_trials: tuple[Path, ...] = ()
    # With a task user: host:port addresses trials may not connect to, besides Temporal's.
    closed_to_trials: tuple[str, ...] = ()
    # Where this agent's trials are reached by the other parts of a trial on several agents;
    # empty: the address of the route to the master.
    address: str = ""
    # Seconds between system-metric samples of a run that asks for them (`profiling`).
    system_metrics_interval: float = SYSTEM_METRICS_INTERVAL
    # Seconds a cancelled or shut-down run's last lines are still sent for; a run that ends on
    # its own waits for its output to be delivered however long the master is away.
    log_close_timeout: float = LOG_CLOSE_TIMEOUT
    # Seconds registered without a liveness activity (the pool lost this agent: its link was
    # cut, say) before it registers again as a new boot and takes trials again.
    rejoin_after: float = UNWATCHED_SECONDS


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m agent_worker",
        description="Epochal agent: runs trials of its resource pool on this machine.",
        epilog=f"The master's cluster token is read from ${CLUSTER_TOKEN_ENV}.")
    p.add_argument("--master", default=os.environ.get("EPOCHAL_MASTER", "http://127.0.0.1:8080"),
                   help="the master's URL (default: $EPOCHAL_MASTER or %(default)s)")
    p.add_argument("--temporal",
                   default=os.environ.get("EPOCHAL_TEMPORAL_ADDRESS", "127.0.0.1:7233"),
                   help="Temporal frontend host:port (default: %(default)s)")
    p.add_argument("--namespace",
                   default=os.environ.get("EPOCHAL_TEMPORAL_NAMESPACE", DEFAULT_NAMESPACE),
                   help="Temporal namespace (default: %(default)s)")
    p.add_argument("--pool", default=DEFAULT_RESOURCE_POOL,
                   help="resource pool to join (default: %(default)s)")
    p.add_argument("--slots", type=int, default=None,
                   help="number of CPU slots to offer (default: one per CPU)")
    p.add_argument("--system-metrics-interval", type=float, default=SYSTEM_METRICS_INTERVAL,
                   metavar="SECONDS",
                   help="how often the system metrics of a trial whose config says "
                        "`profiling: {enabled: true}` are sampled (default: %(default)s)")
    p.add_argument("--log-close-timeout", type=float, metavar="SECONDS",
                   default=os.environ.get(LOG_CLOSE_TIMEOUT_ENV, str(LOG_CLOSE_TIMEOUT)),
                   help="how long the last output of a run that is cancelled, or that the "
                        "agent's shutdown stops, is still sent to an absent master before it "
                        "is given up; a run that ends on its own waits for its output however "
                        f"long (default: ${LOG_CLOSE_TIMEOUT_ENV}, else {LOG_CLOSE_TIMEOUT:g})")
    p.add_argument("--rejoin-after", type=float, metavar="SECONDS",
                   default=os.environ.get(REJOIN_ENV, str(UNWATCHED_SECONDS)),
                   help="how long this agent, registered but no longer watched by its pool (which "
                        "lost it: its network was cut, say), waits before it registers again "
                        "and takes trials; keep it well above the pool's liveness timeout (half "
                        f"the master's agent timeout) (default: ${REJOIN_ENV}, else "
                        f"{UNWATCHED_SECONDS:g})")
    p.add_argument("--work-dir", type=Path, default=Path("~/.epochal/agent"),
                   help="where trials run and model definitions are cached "
                        "(default: %(default)s)")
    p.add_argument("--agent-id", default=None, help="this agent's id (default: the hostname)")
    p.add_argument("--runtime", choices=RUNTIMES,
                   default=os.environ.get("EPOCHAL_AGENT_RUNTIME", "process"),
                   help="run trials as processes on this host, in Docker containers, or "
                        "'auto': Docker where an engine answers (default: %(default)s)")
    p.add_argument("--image-pull", choices=("missing", "always", "never"), default="missing",
                   help="Docker runtime: pull a trial's image when it is missing here, always, "
                        "or never (default: %(default)s)")
    p.add_argument("--task-env", type=Path, default=task_env_from_environ(),
                   help="process runtime: the Python environment (a virtualenv or conda prefix) "
                        "trials run in, its bin first on PATH (default: $EPOCHAL_TASK_ENV, else "
                        "the agent's own)")
    p.add_argument("--task-user", default=os.environ.get(TASK_USER_ENV) or None,
                   help="the one unprivileged user every user's runs are: sandboxed by the "
                        "process runtime; the Docker runtime's containers run as its uid:gid "
                        "(default: $EPOCHAL_TASK_USER, else, when the agent is root, each "
                        "user's own identity (agent_worker/sandbox.py), else the agent's own "
                        "user; 'root' runs process-runtime trials unsandboxed and is refused "
                        "by the Docker runtime)")
    p.add_argument("--hide-from-trials", type=Path, action="append", default=[],
                   metavar="DIR",
                   help="process runtime with a task user: a directory trials must not see "
                        "(repeatable; the work dir and the agent user's home always are)")
    p.add_argument("--share-with-trials", type=Path, action="append",
                   default=[Path(d) for d in os.environ.get(SHARE_ENV, "").split(os.pathsep)
                            if d],
                   metavar="DIR",
                   help="process runtime with a task user: a directory trials see even where it "
                        "would be hidden (each run has its own /tmp, say): a shared Python "
                        f"environment, datasets (repeatable; default: ${SHARE_ENV}, "
                        "os.pathsep-separated)")
    p.add_argument("--close-to-trials", action="append", default=[], metavar="HOST:PORT",
                   help="process runtime with a task user: an address trials may not connect "
                        "to (repeatable; 0.0.0.0:PORT: the port on every address of this host; "
                        "Temporal's always is)")
    p.add_argument("--advertise-address", default=os.environ.get("EPOCHAL_AGENT_ADDRESS", ""),
                   metavar="ADDRESS",
                   help="the address other agents reach this one's trials at, for trials on "
                        "several agents (default: $EPOCHAL_AGENT_ADDRESS, else this host's "
                        "address on its route to the master)")
    p.add_argument("--log-level", default="INFO", help="logging level (default: %(default)s)")
    return p


def parse_args(argv: Sequence[str] | None = None) -> tuple[AgentConfig, str]:
    p = parser()
    args = p.parse_args(argv)
    if args.system_metrics_interval <= 0:
        p.error(f"--system-metrics-interval must be more than 0, got "
                f"{args.system_metrics_interval}")
    if args.log_close_timeout <= 0:
        p.error(f"--log-close-timeout must be more than 0, got {args.log_close_timeout}")
    if args.rejoin_after <= 0:
        p.error(f"--rejoin-after must be more than 0, got {args.rejoin_after}")
    if args.slots is not None and args.slots < 1:
        p.error(f"--slots must be at least 1, got {args.slots}")
    agent_id = args.agent_id or socket.gethostname()
    if not agent_id.strip():
        p.error("--agent-id must not be empty")
    task_env = None
    if args.task_env is not None:
        if args.runtime == "docker":
            p.error("--task-env applies to the process runtime; in the Docker runtime a trial's "
                    "environment is its image (environment.image in the experiment config)")
        try:
            task_env = TaskEnvironment.open(args.task_env)
        except TaskEnvError as err:
            p.error(str(err))
    task_user = None
    try:
        if args.runtime != "docker":
            task_user = task_user_for_agent(args.task_user)
        else:  # checked here so a refusal is a usage error; `auto` checks it in make_runtime
            container_user_for_agent(args.task_user)
    except TaskUserError as err:
        p.error(str(err))
    try:
        temporal_security = TemporalSecurity.from_env()
    except TemporalConnectionError as err:
        p.error(str(err))
    work_dir = args.work_dir.expanduser().resolve()
    config = AgentConfig(
        master_url=args.master.rstrip("/"),
        temporal_address=args.temporal,
        namespace=args.namespace,
        resource_pool=args.pool,
        slots=args.slots,
        work_dir=work_dir,
        agent_id=agent_id,
        runtime=args.runtime,
        image_pull=args.image_pull,
        cluster_token=os.environ.get(CLUSTER_TOKEN_ENV) or None,
        temporal_security=temporal_security,
        task_env=task_env,
        task_user=task_user,
        task_user_name=args.task_user,
        hidden_from_trials=tuple(d.expanduser().resolve() for d in args.hide_from_trials),
        shared_with_trials=tuple(d.expanduser().resolve() for d in args.share_with_trials),
        closed_to_trials=tuple(args.close_to_trials),
        address=args.advertise_address.strip(),
        system_metrics_interval=args.system_metrics_interval,
        log_close_timeout=args.log_close_timeout,
        rejoin_after=args.rejoin_after,
    )
    return config, args.log_level


def make_runtime(config: AgentConfig, slots: list[Slot]) -> Runtime:
    """The runtime `--runtime` names; `auto` is Docker if an engine answers, else processes."""
    choice = config.runtime
    if choice == "auto":
        from agent_worker.docker_engine import engine_answers

        choice = "docker" if engine_answers() else "process"
        logger.info("runtime auto: %s", choice)
    if choice == "docker":
        from agent_worker.docker_runtime import DockerRuntime

        if config.task_env is not None:
            logger.warning("the Docker runtime runs trials in their images; --task-env %s "
                           "is not used", config.task_env.prefix)
        user = container_user_for_agent(config.task_user_name)
        logger.info("task containers run as %s (%d:%d), without capabilities", user.name,
                    user.uid, user.gid)
        return DockerRuntime(agent_id=config.agent_id, slots=slots,
                             pull_policy=config.image_pull, task_user=user,
                             per_user=config.task_user_name is None,
                             master_url=config.master_url)
    if choice != "process":
        raise ValueError(f"unknown runtime {choice!r}; use one of {', '.join(RUNTIMES)}")
    cgroups = RunCgroups.for_agent(config.agent_id, config.work_dir)
    if config.task_user is not None and config.task_user_name is None:
        logger.info("each user's runs are their own identity (uids %s, or the agent user an "
                    "admin linked), each in a sandbox of its own", RUN_ID_RANGE)
    elif config.task_user is not None:
        logger.info("trials run as %s (uid %d), each in a sandbox of its own",
                    config.task_user.name, config.task_user.uid)
    elif os.geteuid() == 0:
        logger.warning("trials run as root, unsandboxed: any trial can read this host's "
                       "secrets (the cluster token among them); see docs/SECURITY.md")
    hidden = (config.work_dir, *config.hidden_from_trials)
    if config.task_env is None:
        return ProcessRuntime(cgroups=cgroups, task_user=config.task_user,
                              per_user=config.task_user_name is None, hidden_from_trials=hidden,
                              shared_with_trials=config.shared_with_trials)
    logger.info("trials run in %s", config.task_env.describe())
    return ProcessRuntime(task_env=config.task_env, cgroups=cgroups,
                          harness_path=HarnessPath.prepare(config.work_dir),
                          task_user=config.task_user, per_user=config.task_user_name is None,
                          hidden_from_trials=hidden,
                          shared_with_trials=config.shared_with_trials)


async def connect_temporal(address: str, namespace: str,
                           security: TemporalSecurity | None = None,
                           cluster_token: str | None = None) -> Client:
    """Connect, retrying for as long as it takes (an agent waits for its cluster); payloads
    are encrypted under the cluster token's key, as the master's (common/payload_codec.py)."""
    security = security or TemporalSecurity()
    delay = 1.0
    attempt = 0
    while True:
        try:
            return await connect(address, namespace, security,
                                 interceptors=tracing.temporal_interceptors(),
                                 data_converter=payload_codec.data_converter(cluster_token))
        except Exception as err:  # the bridge raises RuntimeError; be broad, keep waiting
            attempt += 1
            if attempt == 1 or attempt % 12 == 0:
                logger.warning("cannot connect to Temporal at %s (%s, %s); retrying", address,
                               security.describe(), err)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


class Agent:
    """One agent: registration heartbeat plus a Temporal worker on its own task queue."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        runtime: Runtime | None = None,
        client: Client | None = None,
        heartbeat_throttle: float = HEARTBEAT_THROTTLE_SECONDS,
    ) -> None:
        self.config = config
        self.heartbeat_throttle = heartbeat_throttle
        self.slots = discover_slots(config.slots)
        self.runtime = runtime or make_runtime(config, self.slots)
        self._client = client
        self.liveness = Liveness(config.agent_id)
        self.unwatched_seconds = config.rejoin_after
        self._stop = asyncio.Event()
        self.activities: AgentActivities | None = None
        self.ready = asyncio.Event()  # set once polling
        self.run_ports_changed = asyncio.Event()  # a run's port opened or closed: tell the master

    def stop(self) -> None:
        """Ask the agent to shut down (safe from a signal handler)."""
        if self._stop.is_set():
            logger.info("already shutting down")
            return
        logger.info("shutting down: no new trials; stopping the running ones")
        self._stop.set()

    async def _unless_stopped(self, coro: Coroutine[Any, Any, T]) -> T | None:
        """`coro`'s result, or None if the agent is told to stop first."""
        task = asyncio.ensure_future(coro)
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not task.done():
                task.cancel()
            await asyncio.gather(task, stop, return_exceptions=True)
        return task.result() if not task.cancelled() else None

    async def run(self) -> int:
        """Run until `stop()`; 0 after a requested stop, 1 if a Temporal worker failed."""
        cfg = self.config
        cfg.work_dir.mkdir(parents=True, exist_ok=True)
        cfg.work_dir.chmod(0o700)  # runs, logs waiting for the master: the agent's alone
        headers = {"Authorization": f"Bearer {cfg.cluster_token}"} if cfg.cluster_token else {}
        if not cfg.cluster_token:
            logger.warning("%s is not set: the master will refuse this agent", CLUSTER_TOKEN_ENV)
        async with httpx.AsyncClient(headers=headers) as http:
            registration = Registration(http, cfg.master_url, agent_id=cfg.agent_id,
                                        resource_pool=cfg.resource_pool, slots=self.slots,
                                        boot_id=uuid.uuid4().hex,
                                        address=cfg.address or route_address(cfg.master_url))
            logger.info("agent %s: %d slots, pool %r, master %s, work dir %s", cfg.agent_id,
                        len(self.slots), cfg.resource_pool, cfg.master_url, cfg.work_dir)
            if not await self._unless_stopped(self._register(registration)):
                return 0
            await self.runtime.startup()
            firewall = self.trial_firewall()
            if firewall is not None:
                await asyncio.to_thread(firewall.install)
            # Each user's runs an identity of their own: their ports closed to the others'.
            run_ports = firewall if self.runtime.per_user else None
            registration.addresses = host_addresses(registration.address)
            heartbeat = asyncio.create_task(self._heartbeat(registration, run_ports))
            watcher = (asyncio.create_task(self._close_listeners(run_ports))
                       if run_ports is not None else None)
            try:
                client = self._client or await self._unless_stopped(
                    connect_temporal(cfg.temporal_address, cfg.namespace,
                                     cfg.temporal_security, cfg.cluster_token))
                if client is None:
                    return 0
                cluster_id = await registration.cluster_id()
                self.activities = AgentActivities(
                    agent_id=cfg.agent_id, master_url=cfg.master_url, work_dir=cfg.work_dir,
                    http=http, runtime=self.runtime, slots=SlotPool(self.slots),
                    cluster_id=cluster_id, cluster_token=cfg.cluster_token,
                    address=registration.address,
                    system_metrics_interval=cfg.system_metrics_interval,
                    log_close_timeout=cfg.log_close_timeout, firewall=run_ports)
                return await self._serve(client, self.activities)
            finally:
                for task in (heartbeat, watcher):
                    if task is not None:
                        task.cancel()
                        await asyncio.gather(task, return_exceptions=True)
                if firewall is not None:
                    await asyncio.to_thread(firewall.remove)

    def trial_firewall(self) -> TrialFirewall | None:
        """Rules keeping trials, sandboxed processes or containers on the host's network, from
        Temporal and the addresses given with --close-to-trials (agent_worker/trial_firewall.py):
        matched on the uid runs have, in both runtimes."""
        owner = self.runtime.task_owner
        if owner is None:
            return None
        uids: list[int | str] = [owner[0], *([RUN_ID_RANGE] if self.runtime.per_user else [])]
        return TrialFirewall(uids, [self.config.temporal_address,
                                        *self.config.closed_to_trials],
                             self.config.agent_id, self.config.master_url)

    async def _close_listeners(self, firewall: TrialFirewall) -> None:
        """Close the ports runs listen on to other users' runs (beyond those a run is given),
        a scan every LISTENER_SCAN_SECONDS; a change is told to the master at once."""
        def scan() -> bool:
            return firewall.close_listeners(listeners())
        while True:
            try:
                if await asyncio.to_thread(scan):
                    self.run_ports_changed.set()
            except Exception:  # noqa: BLE001 - the next scan tries again
                logger.exception("cannot close the ports runs listen on to other users' runs")
            await asyncio.sleep(LISTENER_SCAN_SECONDS)

    async def _heartbeat(self, registration: Registration,
                         run_ports: TrialFirewall | None) -> None:
        """Registration heartbeat, at once when the runs' ports changed; a new boot id when
        the pool stopped watching this agent. Each answer's ports of other agents' runs are
        closed to other users' runs here."""
        registered_at = time.monotonic()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.run_ports_changed.wait(), registration.interval)
            self.run_ports_changed.clear()
            watched = self.liveness.watched(self.unwatched_seconds)
            if (self.ready.is_set() and not watched
                    and time.monotonic() - registered_at > self.unwatched_seconds):
                logger.warning("the pool has not watched this agent for %.0f s; registering "
                               "again", self.unwatched_seconds)
                registration.boot_id = uuid.uuid4().hex
                registered_at = time.monotonic()
            if run_ports is not None:
                registration.run_ports = run_ports.held_listeners()
            if await registration.register_once() and run_ports is not None:
                await asyncio.to_thread(run_ports.close_peer_ports, registration.peer_run_ports)

    async def _register(self, registration: Registration) -> bool:
        await registration.wait_registered()
        return True

    def workers(self, client: Client, activities: AgentActivities) -> list[Worker]:
        cfg = self.config
        n = len(self.slots)
        return [
            Worker(
                client,
                task_queue=agent_task_queue(cfg.agent_id),
                activities=[activities.run_trial, activities.reserve_ports,
                            TaskActivities(activities).run_task, self.liveness.agent_liveness],
                # The scheduler decides how many runs come; room for liveness (two briefly,
                # while the pool continues as new) and slot-less runs.
                max_concurrent_activities=n + 4,
                # Cancel running trials at once on shutdown; they get their own kill grace.
                graceful_shutdown_timeout=timedelta(0),
                # A cancel reaches an activity only in the answer to a heartbeat, which the SDK
                # would otherwise send only every 0.8 x heartbeat timeout.
                max_heartbeat_throttle_interval=timedelta(seconds=self.heartbeat_throttle),
                default_heartbeat_throttle_interval=timedelta(seconds=self.heartbeat_throttle),
                identity=f"{os.getpid()}@{cfg.agent_id}",
            )
        ]

    async def _serve(self, client: Client, activities: AgentActivities) -> int:
        workers = self.workers(client, activities)
        runs = [asyncio.create_task(w.run()) for w in workers]
        stop = asyncio.create_task(self._stop.wait())
        logger.info("polling task queues %s",
                    ", ".join(repr(w.task_queue) for w in workers))
        self.ready.set()
        await asyncio.wait([*runs, stop], return_when=asyncio.FIRST_COMPLETED)
        failed = [t for t in runs if t.done()]
        stop.cancel()
        await asyncio.gather(*(w.shutdown() for w in workers), return_exceptions=True)
        results = await asyncio.gather(*runs, stop, return_exceptions=True)
        for task, result in zip(runs, results, strict=False):
            if task in failed and isinstance(result, BaseException):
                logger.error("a Temporal worker stopped: %r", result)
        if failed and not self._stop.is_set():
            logger.error("a Temporal worker stopped on its own; the agent exits")
            return 1
        logger.info("agent %s stopped", self.config.agent_id)
        return 0


async def run_agent(config: AgentConfig) -> int:
    """Run an agent until SIGTERM or SIGINT."""
    agent = Agent(config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, agent.stop)
    try:
        return await agent.run()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def exit_process(code: int) -> NoReturn:
    """End the agent process with `code` once `main` has returned.

    Skips interpreter finalization: the Temporal SDK's native threads may still call into
    Python while the interpreter tears down, which aborts the process (SIGABRT, seen when an
    agent is stopped right after it starts). Everything the agent owns is closed by then;
    only logs and stdio are left to flush.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m agent_worker` and `epochal agent run`; returns the exit code."""
    config, log_level = parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=log_level.upper(),
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    tracing.setup("epochal-agent")
    try:
        return asyncio.run(run_agent(config))
    except TaskUserError as err:
        logger.error("%s", err)
        return 2
