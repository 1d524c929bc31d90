"""The process runtime's sandbox (agent_worker/sandbox.py, sandbox_init.py): as whom a trial
runs, what it sees of the host, and how it is stopped. Real namespaces: these need root, as
the CI has."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import re
import stat
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
from temporalio.exceptions import ApplicationError

from agent_worker.private_files import make_private
from agent_worker.process_runtime import ProcessRuntime, can_make_mount_namespaces, closed_ancestor
from agent_worker.runtime import Launch
from agent_worker.sandbox import TaskUser, TaskUserError, task_user_for_agent
from agent_worker.sandbox_init import outermost
from agent_worker.trial_runs import check_storage_writable, writable_by
from tests.fakes.run_specs import spec_of
from wire.workflow_io import RunTrialInput

needs_root = pytest.mark.skipif(not can_make_mount_namespaces(),
                                reason="sandboxes need root with mount namespaces")


class Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, stdtype: str, line: str) -> None:
        self.lines.append(line)


def test_the_task_user_is_nobody_for_a_root_agent_and_named_errors_say_what_to_do() -> None:
    nobody = pwd.getpwnam("nobody")
    assert task_user_for_agent(None, euid=0) == TaskUser("nobody", nobody.pw_uid, nobody.pw_gid)
    assert task_user_for_agent("root", euid=0) is None  # asked for: unsandboxed
    assert task_user_for_agent(None, euid=1000) is None  # cannot switch: runs as itself
    with pytest.raises(TaskUserError, match=r"'nobody'.* needs root.* uid 1000"):
        task_user_for_agent("nobody", euid=1000)
    with pytest.raises(TaskUserError, match=r"'no-such-user-here': no such user.*useradd"):
        task_user_for_agent("no-such-user-here", euid=0)


def test_hidden_and_kept_paths() -> None:
    assert outermost(["/a/b", "/a", "/c/d", "/c/dd", "relative", ""]) == ["/a", "/c/d", "/c/dd"]


def test_the_first_closed_directory_on_the_way_is_found(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    inner = closed / "open" / "target"
    inner.mkdir(parents=True)
    for directory in (tmp_path, closed.parent):
        directory.chmod(0o755)
    closed.chmod(0o700)
    (closed / "open").chmod(0o755)
    found = closed_ancestor(inner)
    assert found is not None and found in (closed, *closed.parents)
    assert closed_ancestor(Path("/usr/bin/env")) is None


def test_storage_must_be_writable_by_the_task_user(tmp_path: Path) -> None:
    nobody = task_user_for_agent(None, euid=0)
    assert nobody is not None
    owner = (nobody.uid, nobody.gid)
    st = os.stat(tmp_path)
    assert writable_by(os.stat_result((0o40777, *st[1:])), *owner)
    assert not writable_by(os.stat_result((0o40755, *st[1:])), *owner)
    if os.geteuid() != 0:
        return
    made = tmp_path / "made-here"  # a directory the agent makes is given to the task user
    check_storage_writable(spec_of({"checkpoint_storage": {"type": "shared_fs",
                                                           "host_path": str(made)}}), "a1", owner)
    assert (made.stat().st_uid, made.stat().st_gid) == owner
    roots = tmp_path / "roots"
    roots.mkdir(mode=0o755)
    with pytest.raises(ApplicationError, match=rf"{roots} is not writable on agent a1 by the "
                                               rf"task user \(uid {nobody.uid}\)"):
        check_storage_writable(spec_of({"checkpoint_storage": {"type": "shared_fs",
                                                               "host_path": str(roots)}}),
                               "a1", owner)


def _launch(run_dir: Path, entrypoint: str, config: dict[str, Any] | None = None,
            **env: str) -> Launch:
    inp = RunTrialInput(experiment_id=1, trial_id=2, run_id=1, hparams={}, config=config or {},
                        trial_seed=0, latest_checkpoint=None, steps_completed=0)
    return Launch(input=inp, spec=spec_of(config), run_dir=run_dir, entrypoint=entrypoint,
                  env=dict(env))


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    """An agent's work dir with this run's directory, another run's, and a secret beside."""
    work = tmp_path / "work"
    run, other = work / "trials" / "2" / "run-1", work / "trials" / "3" / "run-1"
    for directory in (run, other):
        (directory / "workdir").mkdir(parents=True)
    (other / "workdir" / "trial_info.json").write_text('{"session_token": "the other run\'s"}')
    (work / "secrets.json").write_text("agent secret")
    storage = tmp_path / "storage"
    storage.mkdir()
    return {"work": work, "run": run, "other": other, "storage": storage}


@needs_root
async def test_a_sandboxed_run_sees_its_own_things_and_nothing_else(
        layout: dict[str, Path]) -> None:
    nobody = task_user_for_agent(None, euid=0)
    assert nobody is not None
    os.chown(layout["storage"], nobody.uid, nobody.gid)
    make_private(layout["run"], (nobody.uid, nobody.gid))
    runtime = ProcessRuntime(task_user=nobody, hidden_from_trials=(layout["work"],),
                             heartbeat_interval=0.1)
    probe = layout["run"] / "workdir" / "probe.py"
    probe.write_text("""
import json, os, sys, harness
def read(path):
    try:
        return open(path).read()
    except OSError as err:
        return type(err).__name__
storage = os.environ["STORAGE"]
open(os.path.join(storage, "written"), "w").write("x")
mark = os.environ["MARK"]
for shared in ("/dev/shm", "/var/tmp"):
    open(os.path.join(shared, mark + "-left"), "w").write("x")
print(json.dumps({
    "hosts_shared": [read(os.path.join(d, mark)) for d in ("/dev/shm", "/var/tmp")],
    "uid": os.getuid(), "groups": os.getgroups(), "home": os.environ["HOME"],
    "cwd": os.getcwd(), "token": os.environ["TOKEN"],
    "processes": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "agent_environ": read(f"/proc/{os.environ['AGENT_PID']}/environ"),
    "work": sorted(os.listdir(os.environ["WORK"])),
    "secret": read(os.path.join(os.environ["WORK"], "secrets.json")),
    "other": read(os.environ["OTHER"]),
    "no_new_privs": [l for l in open("/proc/self/status") if l.startswith("NoNewPrivs")],
}))
""")
    os.chown(probe, nobody.uid, nobody.gid)
    config = {"checkpoint_storage": {"type": "shared_fs", "host_path": str(layout["storage"])}}
    logs = Lines()
    mark = f"epochal-test-{os.getpid()}"  # another run's file in the host's shared places
    planted = [Path(d, mark) for d in ("/dev/shm", "/var/tmp")]
    for path in planted:
        path.write_text("another run's")
        path.chmod(0o644)
    launch = _launch(layout["run"], "python3 probe.py", config, TOKEN="run-token", MARK=mark,
                     STORAGE=str(layout["storage"]), AGENT_PID=str(os.getpid()),
                     WORK=str(layout["work"]),
                     OTHER=str(layout["other"] / "workdir" / "trial_info.json"))

    task = asyncio.create_task(runtime.run(launch, logs, lambda: None))
    try:
        # While it runs, no process on the host shows its token on a command line.
        while not task.done():
            for proc in psutil.process_iter(["cmdline"]):
                assert "run-token" not in " ".join(proc.info["cmdline"] or [])
            await asyncio.sleep(0.02)
        status = await task
    finally:
        for path in planted:
            path.unlink()
    assert status.exit_code == 0, logs.lines
    seen = json.loads(logs.lines[-1])
    assert seen["uid"] == nobody.uid and seen["groups"] in ([], [nobody.gid])
    assert seen["cwd"] == str(layout["run"] / "workdir") and seen["token"] == "run-token"
    assert seen["home"] == str(layout["run"])  # its own, beside its working directory
    assert len(seen["processes"]) <= 3 and 1 in seen["processes"]
    assert seen["agent_environ"] == "FileNotFoundError"
    assert seen["work"] == ["trials"]  # the work dir is empty but for the way to its run
    assert seen["secret"] == seen["other"] == "FileNotFoundError"
    assert seen["no_new_privs"] == ["NoNewPrivs:\t1\n"]
    assert (layout["storage"] / "written").stat().st_uid == nobody.uid
    assert not list(layout["run"].parent.glob("*.sandbox.json"))  # the plan is gone
    # /dev/shm and /var/tmp are the run's own: it sees nothing of the host's, leaves nothing.
    assert seen["hosts_shared"] == ["FileNotFoundError", "FileNotFoundError"]
    assert not [p for p in planted if Path(f"{p}-left").exists()]


@needs_root
async def test_a_sandboxed_run_writes_beside_its_working_directory_and_gets_its_bind_mounts(
        layout: dict[str, Path], tmp_path: Path) -> None:
    """`../data` is the run's own (as under Determined's /run/determined/workdir); bind_mounts
    are bound as Docker binds them (Determined's examples bind the host's /tmp onto /tmp, over
    the run's own); shared_fs storage is also where Determined's code looks for it."""
    nobody = task_user_for_agent(None, euid=0)
    assert nobody is not None
    owner = (nobody.uid, nobody.gid)
    make_private(layout["run"], owner)
    tmp = layout["run"].with_name("run-1.tmp")
    tmp.mkdir()
    make_private(tmp, owner)
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    (read_only / "input.txt").write_text("read me")
    os.chown(layout["storage"], *owner)
    mark = f"epochal-bind-{os.getpid()}"
    script = f"""
import json, os
os.makedirs("../data")
open("../data/set.txt", "w").write("kept by the run")
open("/tmp/{mark}", "w").write("for the host")
open("/determined_shared_fs/ckpt.txt", "w").write("a checkpoint")
try:
    open("data-ro/new.txt", "w")
    refused = None
except OSError as err:
    refused = type(err).__name__
print(json.dumps({{"ro": open("data-ro/input.txt").read(), "refused": refused}}))
"""
    config = {"bind_mounts": [{"host_path": "/tmp", "container_path": "/tmp"},
                              {"host_path": str(read_only), "container_path": "data-ro",
                               "read_only": True}],
              "checkpoint_storage": {"type": "shared_fs", "host_path": str(layout["storage"])}}
    runtime = ProcessRuntime(task_user=nobody, hidden_from_trials=(layout["work"],),
                             heartbeat_interval=0.1)
    logs = Lines()
    try:
        status = await runtime.run(_launch(layout["run"], f"{sys.executable} -c \"$SCRIPT\"",
                                           config, SCRIPT=script), logs, lambda: None)
        assert status.exit_code == 0, logs.lines
        assert json.loads(logs.lines[-1]) == {"ro": "read me", "refused": "OSError"}
        assert Path("/tmp", mark).read_text() == "for the host"
    finally:
        Path("/tmp", mark).unlink(missing_ok=True)
    assert (layout["storage"] / "ckpt.txt").read_text() == "a checkpoint"
    data = layout["run"] / "data"
    assert (data / "set.txt").read_text() == "kept by the run"
    assert data.stat().st_uid == nobody.uid and stat.S_IMODE(data.stat().st_mode) == 0o700

    # A host path through a symbolic link (a run may plant one in a shared directory) is not
    # followed by root: the run fails, saying why.
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "link").symlink_to(layout["work"])
    linked = {"bind_mounts": [{"host_path": str(shared / "link"), "container_path": "/mnt"}]}
    logs = Lines()
    status = await runtime.run(_launch(layout["run"], "ls /mnt", linked), logs, lambda: None)
    assert status.exit_code != 0
    assert any("passes through a symbolic link" in line for line in logs.lines), logs.lines
    assert not any("secrets.json" in line for line in logs.lines)

    # A container_path the host lacks is not made on the host's disk; one that would hide the
    # run's own directory cannot be bound: both refused, not retried.
    for container_path, refusal in (
            ("/no-such-dir-e", "/no-such-dir-e does not exist"),
            (str(layout["work"].parent), f"would cover {layout['run']}")):
        wrong = {"bind_mounts": [{"host_path": str(shared), "container_path": container_path}]}
        with pytest.raises(ApplicationError, match=r"bind_mounts\[0\].container_path: .*"
                                                   + re.escape(refusal)) as refused:
            await runtime.run(_launch(layout["run"], "true", wrong), logs, lambda: None)
        assert refused.value.non_retryable
    assert not Path("/no-such-dir-e").exists()


async def test_an_unsandboxed_process_runtime_refuses_bind_mounts(tmp_path: Path) -> None:
    """Never ignored: the trial would write what it means to keep into its own directory."""
    (tmp_path / "run" / "workdir").mkdir(parents=True)
    runtime = ProcessRuntime(heartbeat_interval=0.1)
    config = {"bind_mounts": [{"host_path": "/tmp", "container_path": "/tmp"}]}
    with pytest.raises(ApplicationError, match="bind_mounts: the process runtime binds them "
                                               "only in its sandbox") as refused:
        await runtime.run(_launch(tmp_path / "run", "true", config), Lines(), lambda: None)
    assert refused.value.non_retryable


@needs_root
async def test_a_sandboxed_run_is_stopped_gracefully_and_leaves_nothing(
        layout: dict[str, Path]) -> None:
    nobody = task_user_for_agent(None, euid=0)
    assert nobody is not None
    make_private(layout["run"], (nobody.uid, nobody.gid))
    runtime = ProcessRuntime(task_user=nobody, hidden_from_trials=(layout["work"],),
                             heartbeat_interval=0.1, kill_grace_seconds=5)
    # Stopping takes a while, as saving a checkpoint does: the shell that runs the entrypoint
    # dies of SIGTERM at once, and the run must not end (and SIGKILL its namespace) before it.
    # The handler only notes the signal, as training code does: a handler that printed could
    # land inside the main line's print of 'ready' and fail on stdout's lock ("reentrant call").
    script = ("import signal, subprocess, sys, time\n"
              "asked = []\n"
              "signal.signal(signal.SIGTERM, lambda *a: asked.append(1))\n"
              "subprocess.Popen(['setsid', 'sleep', '600'])\n"
              "print('ready', flush=True)\n"
              "deadline = time.monotonic() + 600\n"
              "while not asked and time.monotonic() < deadline:\n"
              "    time.sleep(0.05)\n"
              "time.sleep(0.5)\n"
              "print('stopping', flush=True)\n"
              "sys.exit(0)\n")
    logs = Lines()

    def nobodys() -> set[int]:
        return {p.pid for p in psutil.process_iter(["username", "status"])
                if p.info["username"] == "nobody" and p.info["status"] != psutil.STATUS_ZOMBIE}

    before = nobodys()  # trials of another suite on this machine are not this run's
    task = asyncio.create_task(runtime.run(
        _launch(layout["run"], f"{sys.executable} -c \"$SCRIPT\"", SCRIPT=script),
        logs, lambda: None))
    for _ in range(200):
        if "ready" in logs.lines:
            break
        await asyncio.sleep(0.05)
    assert "ready" in logs.lines, logs.lines
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert "stopping" in logs.lines  # SIGTERM reached the entrypoint, not a SIGKILL
    assert nobodys() - before == set()  # the setsid sleeper died with the run's namespace


def test_private_files_are_given_to_the_task_user(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "pkg").mkdir(parents=True)
    (run / "pkg" / "code.py").write_text("x = 1\n")
    (run / "train.sh").write_text("true\n")
    (run / "train.sh").chmod(0o755)
    (run / "link").symlink_to("/etc/hostname")
    owner = (os.getuid(), os.getgid())
    make_private(run, owner)
    modes = {p.name: stat.S_IMODE(p.lstat().st_mode) for p in (run, *run.rglob("*"))
             if not p.is_symlink()}
    assert modes == {"run": 0o700, "pkg": 0o700, "code.py": 0o600, "train.sh": 0o700}


# The agent, as a process of its own that the test can SIGKILL: it runs one sandboxed run and
# prints its lines.
_AGENT = """
import asyncio, sys
from pathlib import Path
from agent_worker.process_runtime import ProcessRuntime
from agent_worker.sandbox import task_user_for_agent
from tests.unit.test_sandbox import _launch

class Printed:
    def add(self, stdtype, line):
        print(line, flush=True)

runtime = ProcessRuntime(task_user=task_user_for_agent(None, euid=0),
                         hidden_from_trials=(Path(sys.argv[2]),), heartbeat_interval=0.1)
asyncio.run(runtime.run(_launch(Path(sys.argv[1]), sys.argv[3]), Printed(), lambda: None))
"""


@needs_root
def test_a_killed_agents_runs_die_with_it(layout: dict[str, Path]) -> None:
    """kill -9 of the agent leaves no process of its runs, not even one that left the run's
    process group: nothing writes into a trial the cluster no longer watches."""
    import subprocess

    from tests.waiting import wait_for

    nobody = task_user_for_agent(None, euid=0)
    make_private(layout["run"], (nobody.uid, nobody.gid))
    seconds = str(600 + os.getpid() % 1000)  # this test's sleepers, not another suite's
    entrypoint = f"setsid sh -c 'echo sleeper; exec sleep {seconds}' & sleep {seconds}"
    agent = subprocess.Popen(
        [sys.executable, "-c", _AGENT, str(layout["run"]), str(layout["work"]), entrypoint],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
    try:
        assert agent.stdout is not None
        assert agent.stdout.readline() == "sleeper\n"

        def both_sleepers() -> list[psutil.Process]:
            found = [p for p in psutil.process_iter(["username", "cmdline"])
                     if p.info["username"] == "nobody" and p.info["cmdline"] == ["sleep", seconds]]
            return found if len(found) == 2 else []

        # The entrypoint's sleeper, and the one that left its process group.
        sleepers = wait_for(both_sleepers, 10, "both of the run's sleepers to start")
    finally:
        agent.kill()
        agent.wait()
    wait_for(lambda: not any(map(_alive, sleepers)), 10,
             "the run's processes to die with the agent")


def _alive(process: psutil.Process) -> bool:
    """Running and not a zombie; one that ends between the two questions is not."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_each_user_is_an_identity_of_their_own_or_the_one_an_admin_linked() -> None:
    from agent_worker.sandbox import RUN_ID_BASE, RUN_ID_RANGE, user_identity

    alice, bob = user_identity(7, "alice", None), user_identity(8, "bob", None)
    assert (alice.uid, alice.gid, alice.name) == (RUN_ID_BASE + 7, RUN_ID_BASE + 7,
                                                  "epochal-alice")
    assert bob.uid != alice.uid and RUN_ID_RANGE.startswith(f"{RUN_ID_BASE}-")
    linked = user_identity(9, "carol", {"agentUid": 1234, "agentGid": 1235,
                                        "agentUser": "carol", "agentGroup": "team"})
    assert (linked.uid, linked.gid, linked.name) == (1234, 1235, "carol")
    with pytest.raises(TaskUserError, match="never have root's ids"):
        user_identity(9, "carol", {"agentUid": 0, "agentGid": 0, "agentUser": "root"})
    with pytest.raises(TaskUserError, match="an admin links the user"):
        user_identity(10**9, "many", None)


def test_an_unknown_identity_gets_account_lines_in_its_runs_view(tmp_path: Path) -> None:
    from agent_worker.sandbox import identity_files

    known = identity_files(TaskUser("nobody", pwd.getpwnam("nobody").pw_uid, 65534),
                           tmp_path, tmp_path / "etc")
    assert known == []  # the host's own account serves
    stranger = TaskUser("epochal-alice", 2_000_000_007, 2_000_000_007)
    binds = identity_files(stranger, tmp_path / "home", tmp_path / "etc")
    assert [target for _, target, read_only in binds if read_only] == ["/etc/passwd",
                                                                        "/etc/group"]
    passwd = (tmp_path / "etc" / "passwd").read_text()
    assert passwd.startswith(Path("/etc/passwd").read_text())
    assert passwd.endswith(f"epochal-alice:x:2000000007:2000000007:Epochal user:"
                           f"{tmp_path / 'home'}:/bin/sh\n")
