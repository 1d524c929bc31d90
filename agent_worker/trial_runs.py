"""The agent's activities: `run_trial` runs one run of a trial on this agent (or this agent's
part of a run on several), `reserve_ports` finds free ports for such a run's rendezvous.

It prepares a fresh working directory (model definition, trial_info.json), hands the run to the
agent's `Runtime`, ships its output as task logs and reports how it ended. Cancellation (a kill
from the trial workflow, delivered through the heartbeat) stops the trial's processes and is
re-raised; an agent shutting down fails the run with a retryable `AgentShutdown` error instead,
so the trial restarts elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import socket
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from agent_worker.aio import uninterruptible
from agent_worker.determined_env import (
    FALLBACK_USER,
    determined_environment,
    determined_info_dir,
    determined_model_dir,
    write_determined_info,
)
from agent_worker.logs import LogShipper, naming_exception
from agent_worker.model_def import ModelDefinitions
from agent_worker.private_files import make_private, write_private
from agent_worker.runtime import (
    ExitStatus,
    Launch,
    Runtime,
    checkpoint_cache_dir,
    run_tmp_dir,
    run_workdir,
)
from agent_worker.sandbox import TaskUser, TaskUserError, user_identity
from agent_worker.slots import SlotPool, gpu_environment
from agent_worker.startup_hook import HookWatch, with_startup_hooks
from agent_worker.system_metrics import report_system_metrics
from agent_worker.trial_firewall import TrialFirewall
from agent_worker.trial_info import (
    CHECKPOINT_CACHE_ENV,
    TRIAL_INFO_FILE,
    build_trial_info,
    trial_environment,
)
from common import tracing
from common.temporal_names import RESERVE_PORTS, RUN_TRIAL, allocation_id, task_id
from common.tokens import mint_trial_token
from wire.run_spec import RunSpec, trial_run_spec
from wire.workflow_io import RENDEZVOUS_PORTS, Rendezvous, RunTrialInput, RunTrialResult

# A run's output waiting on disk for an absent master (agent_worker/logs.py), at most.
LOG_SPOOL_BYTES = 512 << 20
# How long a cancelled or shut-down run's last lines are still sent for (`--log-close-timeout`).
LOG_CLOSE_TIMEOUT = 30.0
MAX_PORTS = 16  # what one reserve_ports call may ask for
OWNER_ATTEMPTS = 3  # GET /me again after a dropped connection
# How often a run with `profiling: {enabled: true}` is sampled (agent_worker/system_metrics.py).
SYSTEM_METRICS_INTERVAL = 5.0
# A trial's S3 checkpoint cache goes once no run of it on this agent used it for this long.
CHECKPOINT_CACHE_AGE = 24 * 3600.0

logger = logging.getLogger(__name__)


class AgentActivities:
    """Activities with the agent's state; register `run_trial` with a Temporal worker."""

    def __init__(
        self,
        *,
        agent_id: str,
        master_url: str,
        work_dir: Path,
        http: httpx.AsyncClient,
        runtime: Runtime,
        slots: SlotPool,
        cluster_id: str | None = None,
        cluster_token: str | None = None,
        log_flush_interval: float = 0.5,
        log_close_timeout: float = LOG_CLOSE_TIMEOUT,
        log_spool_bytes: int = LOG_SPOOL_BYTES,
        address: str = "127.0.0.1",
        system_metrics_interval: float = SYSTEM_METRICS_INTERVAL,
        firewall: TrialFirewall | None = None,
    ) -> None:
        self.agent_id = agent_id
        self.master_url = master_url.rstrip("/")
        self.work_dir = work_dir
        self.http = http
        self.runtime = runtime
        self.slots = slots
        self.cluster_id = cluster_id
        self.cluster_token = cluster_token
        self.log_flush_interval = log_flush_interval
        self.log_close_timeout = log_close_timeout
        self.log_spool_bytes = log_spool_bytes
        self.address = address
        self.system_metrics_interval = system_metrics_interval
        self.firewall = firewall  # closes runs' own ports to other users' runs
        self.model_defs = ModelDefinitions(http, self.master_url, work_dir)

    def run_dir(self, inp: RunTrialInput) -> Path:
        return self.work_dir / "trials" / str(inp.trial_id) / f"run-{inp.run_id}"

    @activity.defn(name=RUN_TRIAL)
    async def run_trial(self, inp: RunTrialInput) -> RunTrialResult:
        activity.heartbeat()
        master_url = (inp.master_url or self.master_url).rstrip("/")
        slot_ids = (self.slots.claim(inp.slot_ids) if inp.slot_ids is not None
                    else self.slots.acquire(1))
        try:
            launch = await self.prepare(inp, master_url, slot_ids)
            activity.logger.info("running trial %s run %s in %s on slots %s", inp.trial_id,
                                 inp.run_id, launch.run_dir, slot_ids)
            tracing.count("epochal.trial.runs", agent=self.agent_id)
            status = await self._run(launch, master_url)
        except asyncio.CancelledError:
            if activity.is_worker_shutdown():
                raise ApplicationError(
                    f"agent {self.agent_id} shut down while trial {inp.trial_id} run "
                    f"{inp.run_id} was running; its processes were stopped",
                    type="AgentShutdown") from None
            activity.logger.info("trial %s run %s cancelled; its processes were stopped",
                                 inp.trial_id, inp.run_id)
            raise
        finally:
            self.slots.release(slot_ids)
            # Its output is shipped by now; what it kept there (a token, data) goes.
            await uninterruptible(asyncio.to_thread(remove_run_files, self.run_dir(inp)))
        activity.logger.info("trial %s run %s %s", inp.trial_id, inp.run_id, status.message)
        return RunTrialResult(exit_code=status.exit_code, agent_id=self.agent_id,
                              oom_killed=status.oom_killed, message=status.message)

    @activity.defn(name=RESERVE_PORTS)
    async def reserve_ports(self, count: int) -> list[int]:
        """`count` ports free on this host now, for the rendezvous of a run on several agents
        of which this agent is the chief."""
        return free_ports(max(1, min(int(count), MAX_PORTS)))

    async def _run(self, launch: Launch, master_url: str) -> ExitStatus:
        """Run the launch, shipping its output. The run is not over before its output is
        delivered, however long the master is away (heartbeating meanwhile); on a cancel or a
        shutdown the last lines are still shipped, for at most `log_close_timeout`."""
        inp = launch.input
        assert isinstance(inp, RunTrialInput)
        shipper = self.log_shipper(master_url, task_id(inp.experiment_id, inp.trial_id),
                                   allocation_id(inp.experiment_id, inp.trial_id, inp.run_id))
        shipper.start()
        sampler = asyncio.create_task(report_system_metrics(
            self.http, master_url, launch, self.slots.of(launch.slot_ids),
            self.system_metrics_interval)) if launch.spec.profiling else None
        try:
            watch = HookWatch(shipper)
            async with self.ports_closed_to_others(launch):
                status = watch.explain(await self.runtime.run(launch, watch, activity.heartbeat))
            status = naming_exception(status, shipper.tracebacks.last_exception)
            await shipper.close(None, heartbeat=activity.heartbeat)
        except BaseException:
            await uninterruptible(shipper.close(self.log_close_timeout))
            raise
        finally:
            if sampler is not None:
                sampler.cancel()
                await asyncio.gather(sampler, return_exceptions=True)
        return status

    @contextlib.asynccontextmanager
    async def ports_closed_to_others(self, launch: Launch) -> AsyncIterator[None]:
        """While the run lasts, its ports (its service, torch's rendezvous) answer its own
        user's runs only: a TensorBoard or a c10d store authenticates nobody."""
        if self.firewall is None or launch.user is None or not launch.ports:
            yield
            return
        firewall, uid = self.firewall, launch.user.uid
        rules = [rule for port in launch.ports for rule in await asyncio.to_thread(
            firewall.close_to_other_users, port, uid)]
        try:
            yield
        finally:
            await uninterruptible(asyncio.to_thread(firewall.drop, rules))

    def log_shipper(self, master_url: str, task: str, allocation: str) -> LogShipper:
        """Where a run's output goes: the master's task logs, spooled on this agent's disk while
        the master is away."""
        return LogShipper(self.http, master_url, task_id=task, allocation_id=allocation,
                          agent_id=self.agent_id, flush_interval=self.log_flush_interval,
                          max_spool_bytes=self.log_spool_bytes,
                          spool_dir=self.work_dir / "log-spool")

    async def prepare(self, inp: RunTrialInput, master_url: str,
                      slot_ids: list[int]) -> Launch:
        """A fresh run directory whose working directory holds the model definition and
        trial_info.json, and beside it Determined's info files and clean copy of the model
        definition."""
        spec = trial_run_spec(inp)  # the one the master sent, or the same builder's
        if inp.session_token is None and self.cluster_token:
            # This run's own token: it may write only this trial's reports, and only while
            # this run is the trial's running one (api/auth.py).
            inp = dataclasses.replace(
                inp, session_token=mint_trial_token(self.cluster_token, inp.trial_id,
                                                    inp.run_id))
        # Determined's Core API reads its owner's name (determined_env.py); the run is its
        # owner's own identity here where each user has one (agent_worker/sandbox.py).
        owner_user = await self.experiment_owner(master_url, inp.session_token)
        user, owner = await self.run_identity(owner_user)
        await asyncio.to_thread(check_storage_writable, spec, self.agent_id, owner)
        run_dir = self.run_dir(inp)
        for directory in run_directories(run_dir):
            await asyncio.to_thread(fresh_dir, directory)
        workdir = run_workdir(run_dir)
        await self.model_defs.extract_to(inp.experiment_id, workdir)
        await self.model_defs.extract_to(inp.experiment_id, determined_model_dir(run_dir))
        # One agent's run is its own rendezvous: this host, with ports free here.
        rendezvous = inp.rendezvous or Rendezvous(
            container_addrs=[self.address], container_rank=0,
            container_slot_counts=[len(slot_ids)], ports=free_ports(RENDEZVOUS_PORTS))
        info = build_trial_info(inp, spec, master_url=master_url, agent_id=self.agent_id,
                                cluster_id=self.cluster_id, slot_ids=slot_ids,
                                rendezvous=rendezvous)
        info_path = workdir / TRIAL_INFO_FILE
        await asyncio.to_thread(write_private, info_path, json.dumps(info, indent=2) + "\n")
        env = trial_environment(spec, trial_info_path=str(info_path), master_url=master_url)
        env.update(gpu_environment(self.slots.of(slot_ids)))  # this agent's part's GPUs
        traceparent = tracing.traceparent()  # run_trial's span: the harness's reports continue it
        if traceparent:
            env[tracing.TRACEPARENT_ENV] = traceparent
        username = str(owner_user["username"]) if owner_user else FALLBACK_USER
        mounted = self.runtime.mounts_shared_fs
        await asyncio.to_thread(write_determined_info, determined_info_dir(run_dir), info, spec,
                                username=username, shared_fs_mounted=mounted)
        env.update(determined_environment(info, spec, username=username,
                                          shared_fs_mounted=mounted))
        user_token = await self.owner_session(master_url, inp.trial_id, inp.session_token)
        if user_token:  # what `det` and det.experimental.Determined() in the run log in with
            env["DET_USER_TOKEN"] = user_token
        assert spec.entrypoint is not None  # a trial's: one command line, the model requires it
        launch = Launch(input=inp, spec=spec, run_dir=run_dir,
                        entrypoint=with_startup_hooks(spec.entrypoint, workdir, env), env=env,
                        slot_ids=slot_ids, user=user,
                        ports=rendezvous.ports if rendezvous.container_rank == 0 else [])
        if launch.checkpoint_cache is not None:
            await asyncio.to_thread(prune_checkpoint_caches, self.work_dir / "trials")
            await asyncio.to_thread(launch.checkpoint_cache.mkdir, exist_ok=True)
            await asyncio.to_thread(make_private, launch.checkpoint_cache, owner)
            env[CHECKPOINT_CACHE_ENV] = str(launch.checkpoint_cache)
        for directory in run_directories(run_dir):
            await asyncio.to_thread(make_private, directory, owner)
        return launch

    async def experiment_owner(self, master_url: str, token: str | None
                               ) -> dict[str, Any] | None:
        """The experiment owner (Determined's v1User): `GET /me` with the trial's token names
        them. None when it cannot be learnt."""
        for attempt in range(OWNER_ATTEMPTS if token else 0):
            if attempt:
                await asyncio.sleep(0.5 * attempt)
            try:
                answer = await self.http.get(f"{master_url}/api/v1/me",
                                             headers={"Authorization": f"Bearer {token}"})
                if answer.status_code == 200:
                    user: dict[str, Any] = answer.json()["user"]
                    return user
                logger.warning("GET /api/v1/me answered %s", answer.status_code)
                if answer.status_code < 500:
                    break
            except httpx.TransportError as err:  # a dropped connection: the GET is idempotent
                logger.warning("cannot learn the experiment owner (%s): attempt %d of %d",
                               err, attempt + 1, OWNER_ATTEMPTS)
            except (httpx.HTTPError, KeyError, TypeError, ValueError) as err:
                logger.warning("cannot learn the experiment owner (%s)", err)
                break
        return None

    async def owner_session(self, master_url: str, trial_id: int, token: str | None
                            ) -> str | None:
        """A session of the trial's owner for this run's code (Determined's DET_USER_TOKEN),
        which the trial's end revokes. None when it cannot be had (no tokens on this cluster)."""
        if not token:
            return None
        try:
            answer = await self.http.post(f"{master_url}/api/v1/trials/{trial_id}/user-session",
                                          headers={"Authorization": f"Bearer {token}"})
            if answer.status_code == 200:
                return str(answer.json()["userToken"])
            logger.warning("no session of trial %s's owner for its code: the master answered "
                           "%s", trial_id, answer.status_code)
        except (httpx.HTTPError, KeyError, TypeError, ValueError) as err:
            logger.warning("no session of trial %s's owner for its code (%s)", trial_id, err)
        return None

    async def run_identity(self, owner: dict[str, Any] | None
                           ) -> tuple[TaskUser | None, tuple[int, int] | None]:
        """Who a run of `owner`'s is here (`run_user`), held to the firewall (a linked agent
        user's uid may be new to it), and the uid and gid its files are given to."""
        user = self.run_user(owner)
        if user is None:
            return None, self.runtime.task_owner
        if self.firewall is not None:
            await asyncio.to_thread(self.firewall.include, user.uid)
        return user, (user.uid, user.gid)

    def run_user(self, owner: dict[str, Any] | None) -> TaskUser | None:
        """The identity a run of `owner`'s has here: their own where each user has one, else
        None (the runtime's task user). Without its owner, such a run does not start: it would
        share an identity with other users' runs."""
        if not self.runtime.per_user:
            return None
        if owner is None:
            raise ApplicationError("cannot learn who owns this run, so which identity it has "
                                   "on this agent (GET /api/v1/me)",
                                   type="OwnerUnknown")
        try:
            return user_identity(int(owner["id"]), str(owner["username"]),
                                 owner.get("agentUserGroup"))
        except TaskUserError as err:
            raise ApplicationError(str(err), type="TaskUserError", non_retryable=True) from None


def check_storage_writable(spec: RunSpec, agent_id: str,
                           owner: tuple[int, int] | None = None) -> None:
    """Fail the run at once, naming the directory, when its shared_fs checkpoint storage cannot
    be written here (by `owner`, the task user, when given): otherwise the trial would train
    until its first checkpoint and crash. A directory made here is given to `owner`."""
    storage = spec.checkpoint_storage
    directory = storage.directory if storage is not None else None
    if directory is None:
        return
    try:
        made = not os.path.isdir(directory)
        os.makedirs(directory, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
        if owner is not None and made:
            os.chown(directory, *owner)
    except OSError as err:
        raise ApplicationError(
            f"the checkpoint storage {directory} is not writable on agent {agent_id}: "
            f"{err.strerror or err}", type="CheckpointStorageError", non_retryable=True,
        ) from err
    if owner is not None and not writable_by(os.stat(directory), *owner):
        raise ApplicationError(
            f"the checkpoint storage {directory} is not writable on agent {agent_id} by the "
            f"task user (uid {owner[0]}) trials run as: give that user write access to it "
            "(chown, or a group it is in), or name another host_path",
            type="CheckpointStorageError", non_retryable=True)


def writable_by(st: os.stat_result, uid: int, gid: int) -> bool:
    """Whether uid:gid (no supplementary groups: the sandbox drops them) may create files in
    a directory with this owner and mode."""
    if st.st_uid == uid:
        return st.st_mode & 0o300 == 0o300
    if st.st_gid == gid:
        return st.st_mode & 0o030 == 0o030
    return st.st_mode & 0o003 == 0o003


def free_ports(count: int) -> list[int]:
    """Ports no socket of this host is bound to now (held together, so they differ)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def run_directories(run_dir: Path) -> list[Path]:
    """A run's directory and the working directory in it and, beside it, its Determined info
    and model copy and its own /tmp: each made fresh, given to the run's user, removed after."""
    return [run_dir, run_workdir(run_dir), determined_info_dir(run_dir),
            determined_model_dir(run_dir), run_tmp_dir(run_dir)]


def prune_checkpoint_caches(trials_dir: Path, max_age: float = CHECKPOINT_CACHE_AGE) -> None:
    """Remove trials' S3 checkpoint caches no run has used for `max_age` seconds (the harness
    touches what it stores or restores), and the trial directories they leave empty."""
    now = time.time()
    for cache in trials_dir.glob(f"*/{checkpoint_cache_dir(Path('run')).name}"):
        with contextlib.suppress(OSError):
            newest = max([cache.stat().st_mtime,
                          *(entry.stat().st_mtime for entry in cache.iterdir())])
            if now - newest > max_age:
                shutil.rmtree(cache, ignore_errors=True)
                with contextlib.suppress(OSError):
                    cache.parent.rmdir()


def remove_run_files(run_dir: Path) -> None:
    """Remove what a run had on disk (and its trial's directory once it is empty)."""
    for path in run_directories(run_dir):
        shutil.rmtree(path, ignore_errors=True)
    with contextlib.suppress(OSError):
        run_dir.parent.rmdir()


def fresh_dir(path: Path) -> None:
    """An empty directory at `path`, whatever was there before (a crashed run's files)."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
