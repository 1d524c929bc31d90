"""The master's proxy to interactive tasks (api/routes/proxy.py) and the tunnel clients, against
the live master and real services: a little HTTP + WebSocket app in its own uvicorn process (the
`service` below, what a task's JupyterLab or TensorBoard stands for) and a TCP echo server (a
shell's sshd)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import secrets
import socket
import socketserver
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import asyncpg
import httpx
import pytest
import pytest_asyncio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.typing import Origin, Subprotocol

from api.queries import tasks as task_queries
from api.queries import users as user_queries
from common.processes import free_port
from services import tasks as task_service

if TYPE_CHECKING:
    from tests.master_fixtures import LiveMaster

pytestmark = pytest.mark.asyncio(loop_scope="session")

REPO_ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "a-long-password"


# The task's side: run as `uvicorn tests.integration.test_task_proxy:service`.


async def _describe(request: Request) -> Response:
    """What reached the service, as JSON; `/redirect` answers a redirect to follow or not."""
    body = await request.body()
    if request.url.path.endswith("/redirect"):
        return RedirectResponse("/elsewhere", status_code=302)
    answer = JSONResponse({
        "method": request.method,
        "path": request.scope["raw_path"].decode(),
        "query": request.scope["query_string"].decode(),
        "headers": request.headers.items(),
        "bodyLength": len(body),
        "bodySha256": hashlib.sha256(body).hexdigest(),
    })
    answer.set_cookie("first", "1")
    answer.set_cookie("second", "2")
    return answer


async def _echo(websocket: WebSocket) -> None:
    """Says what reached it, then echoes every message in kind; `close` closes with 4001."""
    offered = websocket.scope.get("subprotocols") or []
    await websocket.accept(subprotocol=offered[0] if offered else None)
    await websocket.send_json({
        "path": websocket.scope["raw_path"].decode(),
        "query": websocket.scope["query_string"].decode(),
        "headers": websocket.headers.items(),
    })
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        if message.get("text") == "close":
            await websocket.close(4001, "asked to")
            return
        if message.get("bytes") is not None:
            await websocket.send_bytes(message["bytes"])
        else:
            await websocket.send_text(message["text"])


METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
service = Starlette(routes=[Route("/{path:path}", _describe, methods=METHODS),
                            WebSocketRoute("/{path:path}", _echo)])


@contextlib.contextmanager
def _serving(command: list[str], port: int, **options: Any) -> Iterator[str]:
    """`command` running until the caller is done, once it listens on `port`: its address."""
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, **options)
    try:
        deadline = time.monotonic() + 60
        while not _listens(port):
            assert process.poll() is None, f"{command[2]} exited ({process.returncode})"
            assert time.monotonic() < deadline, f"{command[2]} does not listen on {port}"
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)


def _listens(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
        return True
    return False


@pytest.fixture(scope="module")
def service_address() -> Iterator[str]:
    port = free_port()
    with _serving([sys.executable, "-m", "uvicorn", "tests.integration.test_task_proxy:service",
                   "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
                  port, cwd=REPO_ROOT) as address:
        yield address


class _EchoHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture(scope="module")
def sshd_address() -> Iterator[str]:
    """A TCP echo server, standing for a shell's sshd."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _EchoHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# The master's side.


async def _new_user(api: httpx.AsyncClient, master: LiveMaster) -> tuple[str, int]:
    """A new non-admin user's token and id."""
    name = f"proxy-{uuid.uuid4().hex[:8]}"
    created = await api.post("/api/v1/users",
                             json={"user": {"username": name}, "password": PASSWORD})
    assert created.status_code == 200, created.text
    async with httpx.AsyncClient(base_url=master.url) as client:
        answer = await client.post("/api/v1/auth/login",
                                   json={"username": name, "password": PASSWORD})
    assert answer.status_code == 200, answer.text
    row = await user_queries.fetch_user_by_username(master.pool, name)
    assert row is not None
    return answer.json()["token"], row["id"]


@pytest_asyncio.fixture(loop_scope="session")
async def owner(api: httpx.AsyncClient, live_master: LiveMaster) -> tuple[str, int]:
    return await _new_user(api, live_master)


@pytest_asyncio.fixture(loop_scope="session")
async def stranger(api: httpx.AsyncClient, live_master: LiveMaster) -> str:
    return (await _new_user(api, live_master))[0]


async def _task(pool: asyncpg.Pool, owner_id: int, task_type: str,
                address: str | None) -> tuple[str, str]:
    """A task row (its id and secret), ready at `address` unless that is None."""
    task_id, secret = str(uuid.uuid4()), secrets.token_hex(16)
    await task_service.insert_task(
        pool, task_id=task_id, task_type=task_type, owner_id=owner_id, workspace_id=1,
        description=f"proxy test {task_type}", config={}, context=None,
        resource_pool="default", slots=0, priority=None, secret=secret, public_key=None,
        private_key=None, experiment_ids=[], trial_ids=[])
    if address is not None:
        assert await task_queries.set_task_ready(pool, task_id, address)
    return task_id, secret


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _header(seen: dict[str, Any], name: str) -> list[str]:
    return [value for key, value in seen["headers"] if key.lower() == name]


async def _last_activity(pool: asyncpg.Pool, task_id: str) -> Any:
    return await pool.fetchval("SELECT last_activity FROM tasks WHERE id = $1", task_id)


async def _age_activity(pool: asyncpg.Pool, task_id: str) -> None:
    await pool.execute("UPDATE tasks SET last_activity = now() - interval '1 hour'"
                       " WHERE id = $1", task_id)


async def test_http_reaches_the_task_under_its_path_without_the_users_credentials(
    live_master: LiveMaster, owner: tuple[str, int], service_address: str
) -> None:
    token, owner_id = owner
    task_id, _ = await _task(live_master.pool, owner_id, "TENSORBOARD", service_address)
    await _age_activity(live_master.pool, task_id)
    before = await _last_activity(live_master.pool, task_id)
    async with httpx.AsyncClient(base_url=live_master.url, timeout=30) as client:
        got = await client.get(
            f"/proxy/{task_id}/data/plugin%20runs?tag=loss&run=a%2Fb",
            headers={**_bearer(token), "Cookie": f"auth={token}; _xsrf=abc; theme=dark",
                     "X-Custom": "kept"})
        assert got.status_code == 200, got.text
        seen = got.json()
        assert seen["method"] == "GET"
        assert seen["path"] == f"/proxy/{task_id}/data/plugin%20runs"
        assert seen["query"] == "tag=loss&run=a%2Fb"
        assert _header(seen, "authorization") == []
        assert _header(seen, "cookie") == ["_xsrf=abc; theme=dark"]
        assert _header(seen, "x-custom") == ["kept"]
        assert _header(seen, "host") == [live_master.url.removeprefix("http://")]
        assert token not in json.dumps(seen)
        assert sorted(got.headers.get_list("set-cookie")) == [
            "first=1; Path=/; SameSite=lax", "second=2; Path=/; SameSite=lax"]

        body = os.urandom(3 * 1024 * 1024 + 17)
        posted = await client.post(f"/proxy/{task_id}/upload?x=1", content=body,
                                   headers=_bearer(token))
        assert posted.status_code == 200, posted.text
        assert posted.json()["method"] == "POST"
        assert posted.json()["bodyLength"] == len(body)
        assert posted.json()["bodySha256"] == hashlib.sha256(body).hexdigest()

        async def chunks() -> AsyncIterator[bytes]:
            for piece in (b"streamed ", b"without ", b"a length"):
                yield piece

        streamed = await client.put(f"/proxy/{task_id}/put", content=chunks(),
                                    headers=_bearer(token))
        assert streamed.json()["bodySha256"] == hashlib.sha256(
            b"streamed without a length").hexdigest()

        redirected = await client.get(f"/proxy/{task_id}/redirect", headers=_bearer(token))
        assert redirected.status_code == 302
        assert redirected.headers["location"] == "/elsewhere"
    assert await _last_activity(live_master.pool, task_id) > before


async def test_a_notebook_gets_its_own_token_and_the_dashboard_cookie_logs_in(
    live_master: LiveMaster, owner: tuple[str, int], service_address: str
) -> None:
    token, owner_id = owner
    task_id, secret = await _task(live_master.pool, owner_id, "NOTEBOOK", service_address)
    async with httpx.AsyncClient(base_url=live_master.url, timeout=30) as client:
        for method in ("GET", "POST"):
            # Jupyter's page sends its own `token` scheme; only the cookie logs the user in.
            got = await client.request(
                method, f"/proxy/{task_id}/lab/api/sessions",
                headers={"Cookie": f"_xsrf=x; auth={token}",
                         "Authorization": "token from-the-page"})
            assert got.status_code == 200, got.text
            seen = got.json()
            assert seen["method"] == method
            assert _header(seen, "authorization") == [f"token {secret}"]
            assert _header(seen, "cookie") == ["_xsrf=x"]
        cross_site = await client.post(f"/proxy/{task_id}/api/contents",
                                       headers={"Cookie": f"auth={token}",
                                                "Origin": "http://evil.example"})
        assert cross_site.status_code == 403
        assert "evil.example" in cross_site.json()["message"]


async def test_only_the_owner_and_admins_reach_a_ready_task(
    live_master: LiveMaster, owner: tuple[str, int], stranger: str, service_address: str
) -> None:
    token, owner_id = owner
    pool = live_master.pool
    task_id, _ = await _task(pool, owner_id, "NOTEBOOK", service_address)
    url = f"/proxy/{task_id}/lab"
    async with httpx.AsyncClient(base_url=live_master.url, timeout=30) as client:
        anonymous = await client.get(url)
        assert anonymous.status_code == 401
        assert "not logged in" in anonymous.json()["message"]
        refused = await client.get(url, headers=_bearer(stranger))
        assert refused.status_code == 403
        assert task_id in refused.json()["message"]
        as_agent = await client.post(url, headers=live_master.agent_headers)
        assert as_agent.status_code == 403
        assert "the cluster token" in as_agent.json()["message"]
        assert (await client.get(url, headers=live_master.admin_headers)).status_code == 200
        assert (await client.get(url, headers=_bearer(token))).status_code == 200

        unknown = await client.get(f"/proxy/{uuid.uuid4()}/lab", headers=_bearer(token))
        assert unknown.status_code == 404
        waiting, _ = await _task(pool, owner_id, "NOTEBOOK", None)
        not_ready = await client.get(f"/proxy/{waiting}/lab", headers=_bearer(token))
        assert not_ready.status_code == 503
        assert not_ready.json()["message"] == f"task {waiting} is not ready yet (state QUEUED)"
        command, _ = await _task(pool, owner_id, "COMMAND", None)
        served = await client.get(f"/proxy/{command}/", headers=_bearer(token))
        assert served.status_code == 404
        assert "command" in served.json()["message"]

        await pool.execute("UPDATE tasks SET state = 'TERMINATED' WHERE id = $1", task_id)
        ended = await client.get(url, headers=_bearer(token))
        assert ended.status_code == 410
        assert f"task {task_id} has ended" in ended.json()["message"]


async def test_a_task_that_does_not_answer_is_a_bad_gateway(
    live_master: LiveMaster, owner: tuple[str, int]
) -> None:
    token, owner_id = owner
    task_id, _ = await _task(live_master.pool, owner_id, "TENSORBOARD", f"127.0.0.1:{free_port()}")
    async with httpx.AsyncClient(base_url=live_master.url, timeout=30) as client:
        got = await client.get(f"/proxy/{task_id}/", headers=_bearer(token))
    assert got.status_code == 502
    assert f"task {task_id} does not answer" in got.json()["message"]


def _ws_url(master: LiveMaster, task_id: str, rest: str = "") -> str:
    return f"ws{master.url.removeprefix('http')}/proxy/{task_id}/{rest}"


async def test_websockets_are_relayed_both_ways_with_the_same_header_rules(
    live_master: LiveMaster, owner: tuple[str, int], stranger: str, service_address: str
) -> None:
    token, owner_id = owner
    task_id, secret = await _task(live_master.pool, owner_id, "NOTEBOOK", service_address)
    await _age_activity(live_master.pool, task_id)
    before = await _last_activity(live_master.pool, task_id)
    kernel = "api/kernels/k1/channels?session_id=s1"
    async with connect(_ws_url(live_master, task_id, kernel),
                       additional_headers={**_bearer(token), "Cookie": f"auth={token}; _xsrf=x"},
                       subprotocols=[Subprotocol("v1.kernel.websocket.jupyter.org")]) as ws:
        assert ws.subprotocol == "v1.kernel.websocket.jupyter.org"
        seen = json.loads(await ws.recv())
        assert seen["path"] == f"/proxy/{task_id}/api/kernels/k1/channels"
        assert seen["query"] == "session_id=s1"
        assert _header(seen, "authorization") == [f"token {secret}"]
        assert _header(seen, "cookie") == ["_xsrf=x"]
        assert _header(seen, "host") == [live_master.url.removeprefix("http://")]
        await ws.send("a text message")
        assert await ws.recv() == "a text message"
        await ws.send(b"\x00\x01binary")
        assert await ws.recv() == b"\x00\x01binary"
        await ws.send("close")
        with pytest.raises(ConnectionClosed):  # the task's close, passed on
            await ws.recv()
        assert ws.close_code == 4001
        assert ws.close_reason == "asked to"
    assert await _last_activity(live_master.pool, task_id) > before

    # The dashboard's cookie, from the master's own pages only.
    async with connect(_ws_url(live_master, task_id), origin=Origin(live_master.url),
                       additional_headers={"Cookie": f"auth={token}"}) as ws:
        assert json.loads(await ws.recv())["path"] == f"/proxy/{task_id}/"
    with pytest.raises(InvalidStatus) as cross_site:
        await connect(_ws_url(live_master, task_id), origin=Origin("http://evil.example"),
                      additional_headers={"Cookie": f"auth={token}"})
    assert cross_site.value.response.status_code == 403
    for headers, status in (({}, 401), (_bearer(stranger), 403)):
        with pytest.raises(InvalidStatus) as refused:
            await connect(_ws_url(live_master, task_id), additional_headers=headers)
        assert refused.value.response.status_code == status
        assert json.loads(refused.value.response.body or b"{}")["message"]


async def _tunnel(command: list[str], env: dict[str, str]) -> None:
    """Echo bytes through a tunnel client run as ssh runs its ProxyCommand."""
    process = await asyncio.create_subprocess_exec(
        *command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        cwd=REPO_ROOT, env=env)
    assert process.stdin is not None and process.stdout is not None
    try:
        payload = os.urandom(1024 * 1024)
        process.stdin.write(b"SSH-2.0-hello\r\n" + payload)
        await process.stdin.drain()
        echoed = await asyncio.wait_for(
            process.stdout.readexactly(len(payload) + 15), timeout=60)
        assert echoed == b"SSH-2.0-hello\r\n" + payload
        process.stdin.close()
        _, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
        assert process.returncode == 0, stderr.decode()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_a_shell_is_a_tcp_tunnel_for_epochals_and_determineds_clients(
    live_master: LiveMaster, owner: tuple[str, int], stranger: str, sshd_address: str,
    det_venv: Path, tmp_path: Path
) -> None:
    token, owner_id = owner
    task_id, _ = await _task(live_master.pool, owner_id, "SHELL", sshd_address)
    await _age_activity(live_master.pool, task_id)
    before = await _last_activity(live_master.pool, task_id)
    env = {**os.environ, "EPOCHAL_TOKEN": token, "EPOCHAL_AUTH_FILE": str(tmp_path / "a.json")}
    await _tunnel([sys.executable, "-m", "cli.tunnel", live_master.url, task_id], env)
    assert await _last_activity(live_master.pool, task_id) > before

    # `det shell open`'s ProxyCommand, as it runs it: no credential (the sshd checks the key).
    await _tunnel([str(det_venv / "python"), "-m", "determined.cli.tunnel", live_master.url,
                   task_id], {**os.environ, "HOME": str(tmp_path)})

    # A credential sent is checked; plain HTTP is not a shell's way in.
    bad = {**env, "EPOCHAL_TOKEN": stranger}
    refused = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cli.tunnel", live_master.url, task_id,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        cwd=REPO_ROOT, env=bad)
    _, stderr = await asyncio.wait_for(refused.communicate(), timeout=60)
    assert refused.returncode == 1
    assert f"may not reach task {task_id}" in stderr.decode()
    async with httpx.AsyncClient(base_url=live_master.url, timeout=30) as client:
        over_http = await client.get(f"/proxy/{task_id}/", headers=_bearer(token))
    assert over_http.status_code == 400
    assert "SSH tunnel" in over_http.json()["message"]
    with pytest.raises(InvalidStatus) as unknown:
        await connect(_ws_url(live_master, str(uuid.uuid4())))
    assert unknown.value.response.status_code == 401


@contextlib.contextmanager
def _jupyterlab(base_url: str, token: str, home: Path) -> Iterator[str]:
    """A real JupyterLab served under `base_url` with Jupyter's token, as a notebook task runs."""
    port = free_port()
    home.mkdir(exist_ok=True)
    command = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1",
               f"--port={port}", f"--ServerApp.base_url={base_url}",
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={home}",
               "--allow-root"]
    env = {**os.environ, "HOME": str(home), "JUPYTER_RUNTIME_DIR": str(home / "runtime")}
    with (home / "jupyter.log").open("wb") as log, _serving(
            command, port, cwd=home, stdout=subprocess.DEVNULL, stderr=log, env=env) as address:
        yield address


async def test_a_real_jupyterlab_runs_a_cell_through_the_proxy(
    live_master: LiveMaster, owner: tuple[str, int], stranger: str, tmp_path: Path
) -> None:
    token, owner_id = owner
    task_id, secret = await _task(live_master.pool, owner_id, "NOTEBOOK", None)
    with _jupyterlab(f"/proxy/{task_id}/", secret, tmp_path / "lab") as address:
        assert await task_queries.set_task_ready(live_master.pool, task_id, address)
        async with httpx.AsyncClient(base_url=live_master.url, timeout=60,
                                     cookies={"auth": token}) as browser:
            page = await browser.get(f"/proxy/{task_id}/lab")
            assert page.status_code == 200, page.text
            assert "JupyterLab" in page.text
            # A POST logged in by the cookie alone, as the browser's page makes it.
            kernel = await browser.post(f"/proxy/{task_id}/api/kernels", json={},
                                        headers={"Origin": live_master.url})
            assert kernel.status_code == 201, kernel.text
            kernel_id = kernel.json()["id"]
        async with httpx.AsyncClient(base_url=live_master.url, timeout=60,
                                     cookies={"auth": stranger}) as other:
            refused = await other.get(f"/proxy/{task_id}/api/kernels")
            assert refused.status_code == 403
        channels = _ws_url(live_master, task_id, f"api/kernels/{kernel_id}/channels")
        async with connect(channels, origin=Origin(live_master.url),
                           additional_headers={"Cookie": f"auth={token}"}) as ws:
            await ws.send(json.dumps({
                "header": {"msg_id": "m1", "msg_type": "execute_request", "username": "",
                           "session": "s1", "version": "5.3"},
                "parent_header": {}, "metadata": {}, "channel": "shell",
                "content": {"code": "1+1", "silent": False}}))
            async with asyncio.timeout(60):
                while True:
                    message = json.loads(await ws.recv())
                    if message["msg_type"] == "execute_result":
                        break
            assert message["content"]["data"]["text/plain"] == "2"
