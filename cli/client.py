"""The CLI's HTTP client for the master's REST API, and the errors every command may raise.

Errors the user can act on are `CliError`s: the root command prints `error: <message>` on
stderr and exits with the error's `exit_code`, never a traceback. Two kinds come from here:

- `MasterUnreachable`: nothing answered at the master URL (exit 1).
- `ConnectionLost`: the master stopped answering in the middle (exit 1).
- `ApiError`: the master answered with an error status; its JSON `message`/`details` is what
  gets printed (exit 1).

Tests replace `transport_factory` to run the commands against an `httpx.MockTransport`.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from common import tracing

if TYPE_CHECKING:
    import httpx

# httpx loads its own command line (click, pygments, rich.syntax) whenever click is installed,
# a third of its import time; the CLI never runs it, so its import fails into httpx's stub.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]

DEFAULT_MASTER = "http://127.0.0.1:8080"
MASTER_ENV = "EPOCHAL_MASTER"
API_PREFIX = "/api/v1"

# Seconds to wait for an ordinary answer, and for uploading a model definition (up to 96 MiB).
TIMEOUT = 30.0
UPLOAD_TIMEOUT = 300.0
# How many items to ask for per page when a command shows a whole list.
PAGE_SIZE = 500

# The seam for tests: a callable returning the transport every new `Client` uses (None: the
# network).
transport_factory: Callable[[], httpx.BaseTransport] | None = None

JSON = dict[str, Any]


class CliError(Exception):
    """An expected failure: printed as `error: <message>` (then `details`), exit `exit_code`."""

    def __init__(self, message: str, details: list[str] | None = None, exit_code: int = 1):
        super().__init__(message)
        self.message = message
        self.details = details or []
        self.exit_code = exit_code


class MasterUnreachable(CliError):
    """Nothing answered at the master's URL."""

    def __init__(self, url: str, reason: str):
        super().__init__(
            f"cannot reach the master at {url}: {reason} (is the cluster up? `epochal cluster up`)"
        )
        self.url = url
        self.reason = reason


class ConnectionLost(CliError):
    """The master stopped answering in the middle of a request or a stream (it restarted, the
    network dropped, it took too long)."""


class ApiError(CliError):
    """The master answered with an error status."""

    def __init__(self, status: int, message: str, details: list[str] | None = None):
        super().__init__(message, details)
        self.status = status


@contextlib.contextmanager
def naming(url: str, who: str) -> Iterator[None]:
    """The block's errors said as `who`'s (`{who} at {url}: ...`) unless they name `url`: which
    of two masters failed, when a command talks to both."""
    try:
        yield
    except MasterUnreachable as err:
        raise CliError(f"cannot reach {who} at {url}: {err.reason}") from None
    except ApiError as err:
        if url in err.message:
            raise
        raise ApiError(err.status, f"{who} at {url}: {err.message}", err.details) from None
    except CliError as err:
        if url in err.message:
            raise
        raise CliError(f"{who} at {url}: {err.message}", err.details, err.exit_code) from None


def resolve_master(option: str | None) -> str:
    """The master URL: the `-m/--master` option, else env EPOCHAL_MASTER, else the default."""
    url = (option or os.environ.get(MASTER_ENV) or DEFAULT_MASTER).strip()
    if "://" not in url:
        url = "http://" + url
    return url.rstrip("/")


def master_url(ctx: Any) -> str:
    """The master URL the root command resolved (a click/typer context), or the default one."""
    root = ctx.find_root() if ctx is not None else None
    obj = getattr(root, "obj", None)
    if isinstance(obj, dict) and obj.get("master"):
        return str(obj["master"])
    return resolve_master(None)


def _reason(exc: Exception) -> str:
    text = str(exc).strip()
    return text or type(exc).__name__


def _error_from_response(response: httpx.Response) -> ApiError:
    """An ApiError carrying the server's own words when it sent the contract's error JSON."""
    status = response.status_code
    request = response.request
    where = f"{request.method} {request.url.path}"
    try:
        body = response.json()
    except ValueError:
        body = None
    message: str | None = None
    details: list[str] = []
    if isinstance(body, dict):
        if isinstance(body.get("message"), str) and body["message"]:
            message = body["message"]
        raw_details = body.get("details")
        if isinstance(raw_details, list):
            details = [str(d) for d in raw_details]
        detail = body.get("detail")  # FastAPI's default error shape
        if message is None and isinstance(detail, str):
            message = detail
        elif isinstance(detail, list):
            for d in detail:
                if isinstance(d, dict) and "msg" in d:
                    loc = ".".join(str(p) for p in d.get("loc", []) if p not in ("body", "query"))
                    details.append(f"{loc}: {d['msg']}" if loc else str(d["msg"]))
                else:
                    details.append(str(d))
    if message is None:
        text = response.text.strip()
        reason = response.reason_phrase or "error"
        message = f"the master answered {status} {reason} to {where}"
        if text and len(text) < 300 and body is None:
            message += f": {text}"
    elif status >= 500:
        message = f"the master failed on {where} ({status}): {message}"
    if status == 401 and "authorization" not in request.headers and message.startswith(
            "not logged in"):  # a route that needs a login (not a refused login itself)
        master = f"{request.url.scheme}://{request.url.netloc.decode()}"
        message = (f"not logged in to {master}: log in with `epochal user login NAME` (or point "
                   "-m / EPOCHAL_MASTER at the master you are logged in to)")
        details = []
    return ApiError(status, message, details)


class Client:
    """A small wrapper over `httpx.Client` speaking the contract's REST API under /api/v1."""

    def __init__(self, master_url: str, timeout: float = TIMEOUT, *, anonymous: bool = False,
                 token: str | None = None):
        """`token`: this one instead of the login the CLI keeps for `master_url` (another
        cluster's, as `epochal import determined` reads its source)."""
        import httpx  # here, not at the top: `epochal --help` need not load it

        from cli import credentials

        self.master_url = master_url
        transport = transport_factory() if transport_factory is not None else None
        headers = {"Accept": "application/json"}
        if token is None and not anonymous:
            token = credentials.token_for(master_url)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=master_url + API_PREFIX,
            timeout=httpx.Timeout(timeout, connect=10.0),
            transport=transport,
            headers=headers,
            # A plain-http master speaks no TLS (and redirects are not followed): skip loading
            # the CA bundle, a tenth of a short command's time.
            verify=not master_url.startswith("http://"),
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        import httpx

        tracing.inject(headers := dict(kwargs.pop("headers", None) or {}))
        try:
            response = self._http.request(method, path, headers=headers, **kwargs)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise MasterUnreachable(self.master_url, _reason(exc)) from None
        except httpx.TimeoutException:
            raise ConnectionLost(
                f"the master at {self.master_url} did not answer {method} {API_PREFIX}{path} "
                "in time"
            ) from None
        except httpx.TransportError as exc:
            raise ConnectionLost(
                f"lost the connection to the master at {self.master_url}: {_reason(exc)}"
            ) from None
        if response.status_code >= 400:
            raise _error_from_response(response)
        return response

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._send(method, path, **kwargs)
        if not response.content:
            return {}
        try:
            return response.json()
        except ValueError:
            raise CliError(
                f"the master answered {method} {API_PREFIX}{path} with something that is not JSON"
            ) from None

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None, timeout: float | None = None) -> Any:
        import httpx

        kwargs: dict[str, Any] = {"json": body if body is not None else {}}
        if timeout is not None:
            kwargs["timeout"] = httpx.Timeout(timeout, connect=10.0)
        return self.request("POST", path, **kwargs)

    def get_all(self, path: str, key: str, params: dict[str, Any] | None = None) -> JSON:
        """Every item of a paginated list, as one answer `{key: [...], "pagination": {...}}`."""
        items: list[Any] = []
        offset = 0
        answer: Any = {}
        while True:
            page_params = {**(params or {}), "limit": PAGE_SIZE, "offset": offset}
            answer = self.get(path, page_params)
            page = (answer.get(key) or []) if isinstance(answer, dict) else []
            items.extend(page)
            pagination = answer.get("pagination") if isinstance(answer, dict) else None
            total = pagination.get("total") if isinstance(pagination, dict) else None
            offset += len(page)
            if not page or not isinstance(total, int) or offset >= total:
                break
        return {key: items, "pagination": {"offset": 0, "limit": len(items), "total": len(items)}}

    @contextlib.contextmanager
    def _stream(self, path: str, params: dict[str, Any] | None = None
                ) -> Iterator[httpx.Response]:
        """A GET whose answer is read as it arrives (no read timeout: followed logs can be
        quiet for as long as training is); errors as the CLI's own."""
        import httpx

        headers: dict[str, str] = {}
        tracing.inject(headers)
        try:
            with self._http.stream(
                "GET", path, params=params, timeout=httpx.Timeout(None, connect=10.0),
                headers=headers,
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    raise _error_from_response(response)
                yield response
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise MasterUnreachable(self.master_url, _reason(exc)) from None
        except httpx.TransportError as exc:
            raise ConnectionLost(
                f"lost the connection to the master at {self.master_url} while streaming: "
                f"{_reason(exc)}"
            ) from None

    @contextlib.contextmanager
    def stream_bytes(self, path: str) -> Iterator[Iterator[bytes]]:
        """The body of a large answer (a checkpoint's tar), as it arrives."""
        with self._stream(path) as response:
            yield response.iter_bytes(1024 * 1024)

    def stream_ndjson(self, path: str, params: dict[str, Any] | None = None) -> Iterator[Any]:
        """Yield each JSON line of a streamed answer."""
        with self._stream(path, params) as response:
            for line in response.iter_lines():
                line = line.strip()
                if not line:
                    continue
                try:
                    yield json.loads(line)
                except ValueError:
                    continue
