"""The `run_task` activity: one interactive task (a command, JupyterLab, an SSH server or a
TensorBoard) on this agent's slots, in the agent's runtime, until it ends.

The task's launch (its config, its service's credential, its owner's session for the code) is
fetched from the master with the cluster token, never carried in a workflow's history. The task
runs in a fresh directory holding its context files; a service listens on a free port of the
agent's address, under the path the master's proxy forwards (`/proxy/<taskId>/`), and the agent
tells the master it is ready once the port answers. Output is shipped as the task's logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import pwd
import shlex
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from agent_worker.aio import uninterruptible
from agent_worker.private_files import make_private
from agent_worker.runtime import ExitStatus, Launch, run_tmp_dir, run_workdir
from agent_worker.slots import gpu_environment
from agent_worker.startup_hook import HookWatch, with_startup_hooks
from agent_worker.trial_runs import AgentActivities, free_ports, fresh_dir
from common.temporal_names import RUN_TASK, task_allocation_id
from wire.run_spec import RunSpec, task_run_spec
from wire.workflow_io import RunTaskInput, RunTaskResult

logger = logging.getLogger(__name__)

READY_POLL_SECONDS = 0.25
MAX_CONTEXT_BYTES = 128 << 20  # the API bounds a task's files to 96 MiB


class TaskActivities:
    """`run_task`, with the agent's state (its HTTP client, runtime, slots, address)."""

    def __init__(self, agent: AgentActivities) -> None:
        self.agent = agent

    def run_dir(self, task_id: str) -> Path:
        return self.agent.work_dir / "tasks" / task_id

    @activity.defn(name=RUN_TASK)
    async def run_task(self, inp: RunTaskInput) -> RunTaskResult:
        activity.heartbeat()
        agent = self.agent
        master_url = (inp.master_url or agent.master_url).rstrip("/")
        slot_ids = agent.slots.claim(inp.slot_ids)
        try:
            launch = await self.prepare(inp, master_url, slot_ids)
            activity.logger.info("running %s %s in %s on slots %s", inp.task_type.lower(),
                                 inp.task_id, launch.run_dir, slot_ids)
            status = await self._run(launch, master_url)
        except asyncio.CancelledError:
            if activity.is_worker_shutdown():
                raise ApplicationError(
                    f"agent {agent.agent_id} shut down while task {inp.task_id} ran; its "
                    "processes were stopped", type="AgentShutdown", non_retryable=True) from None
            raise
        finally:
            agent.slots.release(slot_ids)
            for directory in task_directories(self.run_dir(inp.task_id)):
                await uninterruptible(asyncio.to_thread(shutil.rmtree, directory, True))
        return RunTaskResult(exit_code=status.exit_code, agent_id=agent.agent_id,
                             message=status.message)

    async def prepare(self, inp: RunTaskInput, master_url: str, slot_ids: list[int]) -> Launch:
        """The task's directory with its files, and what runs there."""
        fetched = await self._get(master_url, f"/api/v1/tasks/{inp.task_id}/launch")
        assert isinstance(fetched, dict)
        spec = task_run_spec(fetched.get("config") or {})
        run_dir = self.run_dir(inp.task_id)
        workdir = run_workdir(run_dir)
        for directory in task_directories(run_dir):
            await asyncio.to_thread(fresh_dir, directory)
        if fetched.get("hasContext"):
            archive = await self._get(master_url, f"/api/v1/tasks/{inp.task_id}/context",
                                      raw=True)
            assert isinstance(archive, bytes)
            await asyncio.to_thread(extract_context, archive, workdir)
        user, owner = await self.agent.run_identity(fetched.get("owner"))
        for directory in task_directories(run_dir):
            await asyncio.to_thread(make_private, directory, owner)
        port = free_ports(1)[0]
        command = task_command(inp.task_type, inp.task_id, spec, fetched,
                               host=self.agent.address, port=port, workdir=workdir)
        env = task_environment(spec, fetched, master_url=master_url, task_id=inp.task_id,
                               agent_id=self.agent.agent_id, run_dir=run_dir)
        env.update(gpu_environment(self.agent.slots.of(slot_ids)))
        return Launch(input=inp, spec=spec, run_dir=run_dir,
                      entrypoint=with_startup_hooks(command, workdir, env), env=env,
                      slot_ids=slot_ids, user=user,
                      ports=[] if inp.task_type == "COMMAND" else [port],
                      service=None if inp.task_type == "COMMAND"
                      else f"{self.agent.address}:{port}")

    async def _run(self, launch: Launch, master_url: str) -> ExitStatus:
        """Run it, say when it is ready, ship its output (delivered before the run is over);
        its service's port answers its owner's runs only meanwhile."""
        inp = launch.input
        assert isinstance(inp, RunTaskInput)
        shipper = self.agent.log_shipper(master_url, inp.task_id, task_allocation_id(inp.task_id))
        shipper.start()
        async with self.agent.ports_closed_to_others(launch):
            watch = HookWatch(shipper)
            run = asyncio.ensure_future(self.agent.runtime.run(launch, watch,
                                                               activity.heartbeat))
            ready = asyncio.ensure_future(self._tell_ready(
                inp.task_id, launch.service, master_url, run.done, self.task_user(launch)))
            try:
                status = watch.explain(await run)
                await shipper.close(None, heartbeat=activity.heartbeat)
            except BaseException:
                run.cancel()  # stops its processes: wait until they are
                await uninterruptible(_settled(run))
                await uninterruptible(shipper.close(self.agent.log_close_timeout))
                raise
            finally:
                ready.cancel()
                await asyncio.gather(ready, return_exceptions=True)
        return status

    async def _tell_ready(self, task_id: str, service: str | None, master_url: str,
                          over: Callable[[], bool], user: str) -> None:
        """Once the service accepts connections (a command: at once), tell the master."""
        if service is not None:
            host, _, port = service.rpartition(":")
            while not over():
                with contextlib.suppress(OSError):
                    _, writer = await asyncio.open_connection(host, int(port))
                    writer.close()
                    break
                await asyncio.sleep(READY_POLL_SECONDS)
            else:
                return
        answer = await self.agent.http.post(
            f"{master_url}/api/v1/tasks/{task_id}/ready",
            json={"proxyAddress": service, "user": user})
        if answer.status_code >= 400:
            logger.warning("the master refused task %s's ready: %s %s", task_id,
                           answer.status_code, answer.text[:200])

    def task_user(self, launch: Launch) -> str:
        """Who the task runs as (a shell's ssh logs in as them: Determined's agentUserGroup)."""
        if launch.user is not None:
            return launch.user.name
        owner = self.agent.runtime.task_owner
        uid = owner[0] if owner is not None else os.geteuid()
        try:
            return pwd.getpwuid(uid).pw_name
        except KeyError:
            return str(uid)

    async def _get(self, master_url: str, path: str, *, raw: bool = False) -> Any:
        """A launch part from the master (the HTTP client carries the cluster token)."""
        try:
            answer = await self.agent.http.get(f"{master_url}{path}", timeout=60.0)
        except httpx.HTTPError as err:
            raise ApplicationError(f"cannot fetch {path} from the master: {err}",
                                   type="TaskLaunchUnavailable") from None
        if answer.status_code >= 400:
            raise ApplicationError(
                f"the master answered {answer.status_code} to {path}: {answer.text[:300]}",
                type="TaskLaunchRefused", non_retryable=True)
        if raw:
            if len(answer.content) > MAX_CONTEXT_BYTES:
                raise ApplicationError(f"the task's files are over {MAX_CONTEXT_BYTES} bytes",
                                       type="TaskLaunchRefused", non_retryable=True)
            return answer.content
        return answer.json()


async def _settled(run: asyncio.Future[Any]) -> None:
    await asyncio.gather(run, return_exceptions=True)


def task_directories(run_dir: Path) -> list[Path]:
    """A task's directory, its working directory and, beside them, its own /tmp: each made
    fresh, given to the task's user, removed after. Without its own /tmp a task would share the
    host's with every other user's tasks (the sandbox binds this one there)."""
    return [run_dir, run_workdir(run_dir), run_tmp_dir(run_dir)]


def extract_context(archive: bytes, workdir: Path) -> None:
    """The task's files (a .tar.gz made by the API), with tarfile's `data` filter: no absolute
    paths, no links out of the directory, no devices."""
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as tar:
        tar.extractall(workdir, filter="data")


def task_command(task_type: str, task_id: str, spec: RunSpec, launch: dict[str, Any], *,
                 host: str, port: int, workdir: Path) -> str:
    """The shell command line of the task: the user's for a command (one command line: the
    config model made it so), else its service's, listening on host:port under the proxy's
    path (a notebook's files are the working directory's). `launch` is what the master
    answered for it (its service's secret, the experiments a TensorBoard shows)."""
    prefix = f"/proxy/{task_id}"
    if task_type == "COMMAND":
        if not spec.entrypoint:
            raise ApplicationError(f"command {task_id} has no entrypoint",
                                   type="TaskLaunchRefused", non_retryable=True)
        return spec.entrypoint
    if task_type == "NOTEBOOK":
        return shlex.join([
            "jupyter", "lab", "--no-browser", f"--ip={host}", f"--port={port}",
            "--port-retries=0", f"--ServerApp.base_url={prefix}/",
            f"--ServerApp.root_dir={workdir}",
            # Reached only through the master's proxy, which sends this token.
            f"--IdentityProvider.token={launch['secret']}",
            # The browser's origin is the master's address, not this host's.
            "--ServerApp.allow_origin=*", "--ServerApp.allow_remote_access=True",
            "--allow-root",  # an agent without a task user runs it as root
        ])
    if task_type == "TENSORBOARD":
        experiments = ",".join(str(e) for e in launch.get("experimentIds") or [])
        trials = ",".join(str(t) for t in launch.get("trialIds") or [])
        argv = ["python3", "-m", "harness.tensorboard", "--host", host, "--port", str(port),
                "--path-prefix", prefix, "--logdir", str(workdir / "tensorboard")]
        if experiments:
            argv += ["--experiment-ids", experiments]
        if trials:
            argv += ["--trial-ids", trials]
        return shlex.join(argv)
    if task_type == "SHELL":
        return shlex.join(["python3", "-m", "harness.shell", "--host", host, "--port",
                           str(port)])
    raise ApplicationError(f"task {task_id} has an unknown type {task_type!r}",
                           type="TaskLaunchRefused", non_retryable=True)


def task_environment(spec: RunSpec, launch: dict[str, Any], *, master_url: str,
                     task_id: str, agent_id: str, run_dir: Path) -> dict[str, str]:
    """The user's variables, and Determined's: a task's code reaches the master as its owner
    (`det` inside a notebook or command works as on Determined)."""
    env = dict(spec.environment_variables)
    token = str(launch.get("userToken") or "")
    env.update({
        "DET_MASTER": master_url,
        "EPOCHAL_MASTER": master_url,
        "DET_USER": str(launch.get("username") or ""),
        "DET_USER_TOKEN": token,
        "DET_SESSION_TOKEN": token,
        "DET_TASK_ID": task_id,
        "DET_ALLOCATION_ID": task_allocation_id(task_id),
        "DET_TASK_TYPE": str(launch.get("taskType") or ""),
        "DET_AGENT_ID": agent_id,
        "DET_RESOURCES_TYPE": "docker-container",
        # Jupyter's and IPython's own files stay in the task's directory, beside its files.
        "JUPYTER_CONFIG_DIR": str(run_dir / ".jupyter"),
        "JUPYTER_DATA_DIR": str(run_dir / ".local" / "share" / "jupyter"),
        "JUPYTER_RUNTIME_DIR": str(run_dir / ".local" / "share" / "jupyter" / "runtime"),
        "IPYTHONDIR": str(run_dir / ".ipython"),
    })
    if launch.get("publicKey"):
        env["EPOCHAL_SHELL_PUBLIC_KEY"] = str(launch["publicKey"])
    return env
