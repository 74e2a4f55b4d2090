"""Servers the reliability tests own: a private embedded PostgreSQL they may kill,
and pgbouncer in front of a PostgreSQL unix socket.

The private PostgreSQL is started by a short-lived child process
(``EmbeddedPostgres(dir).start(keep_running=True)``), so the postmaster
belongs to no handle of this process: the test can SIGKILL it and start it
again, and the server recovers from its WAL like after a power cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import asyncpg
import psutil
import pytest

from memsvc.core.settings import Settings
from memsvc.db import migrate
from memsvc.db.embedded import running_postmaster_pid
from memsvc.testing.postgres import TestPostgres

_START_SCRIPT = (
    "import sys\n"
    "from memsvc.db.embedded import EmbeddedPostgres\n"
    "print(EmbeddedPostgres(sys.argv[1]).start(keep_running=True))\n"
)


class PrivatePostgres:
    """An embedded PostgreSQL in its own directory, which a test may crash."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.dsn = ""

    @property
    def pid(self) -> int | None:
        """The postmaster's pid, or None when the server is down."""
        return running_postmaster_pid(self.directory)

    def start(self) -> str:
        """Start the server (recovering from the WAL after a crash); returns its DSN."""
        result = subprocess.run(
            [sys.executable, "-c", _START_SCRIPT, str(self.directory)],
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"embedded PostgreSQL did not start:\n{result.stderr[-2000:]}")
        self.dsn = result.stdout.strip().splitlines()[-1]
        return self.dsn

    def kill(self, timeout: float = 30.0) -> None:
        """SIGKILL the postmaster and wait until it and every child process are gone."""
        pid = self.pid
        if pid is None:
            return
        postmaster = psutil.Process(pid)
        children = postmaster.children(recursive=True)
        os.kill(pid, signal.SIGKILL)
        _, alive = psutil.wait_procs([postmaster, *children], timeout=timeout)
        if alive:
            raise RuntimeError(f"PostgreSQL processes outlived SIGKILL: {alive}")

    def stop(self) -> None:
        """Fast shutdown (SIGINT), waiting for every process to exit."""
        pid = self.pid
        if pid is None:
            return
        with contextlib.suppress(psutil.NoSuchProcess):
            postmaster = psutil.Process(pid)
            children = postmaster.children(recursive=True)
            os.kill(pid, signal.SIGINT)
            _, alive = psutil.wait_procs([postmaster, *children], timeout=30)
            for process in alive:
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.kill()


async def create_migrated_database(dsn: str, name: str) -> str:
    """Create database ``name`` on the server of ``dsn`` and migrate it; returns its DSN."""
    from memsvc.testing.postgres import settings_for_tests, with_database

    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f"CREATE DATABASE {name}")
    finally:
        await conn.close()
    target = with_database(dsn, name)
    settings: Settings = settings_for_tests(target)
    await asyncio.to_thread(migrate.upgrade, settings, target)
    return target


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# Startup parameters pgbouncer accepts and drops (it refuses unknown ones).
IGNORED_STARTUP_PARAMETERS = ",".join(
    (
        "extra_float_digits",
        "application_name",
        "statement_timeout",
        "lock_timeout",
        "hnsw.ef_search",
        "hnsw.iterative_scan",
        "hnsw.max_scan_tuples",
    )
)
PGBOUNCER_USER = "pgserver"  # pgbouncer refuses to run as root; the embedded server's user


class PgBouncer:
    """pgbouncer in transaction pooling mode on a loopback port, in front of a unix socket."""

    def __init__(self, socket_dir: str, socket_port: int, databases: list[str]) -> None:
        self.socket_dir = socket_dir
        self.socket_port = socket_port
        self.databases = databases
        self.port = _free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="memsvc-pgbouncer-"))
        self._process: subprocess.Popen[bytes] | None = None

    @staticmethod
    def executable() -> str | None:
        """pgbouncer's path, or None when it is not installed."""
        return shutil.which("pgbouncer") or (
            "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None
        )

    def dsn(self, database: str) -> str:
        """A DSN reaching ``database`` through pgbouncer."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> PgBouncer:
        """Write the configuration, start pgbouncer and wait until it accepts connections."""
        executable = self.executable()
        if executable is None:
            raise RuntimeError("pgbouncer is not installed")
        dbs = "\n".join(
            f"{name} = host={self.socket_dir} port={self.socket_port} dbname={name} user=postgres"
            for name in self.databases
        )
        (self.directory / "users.txt").write_text('"postgres" ""\n')
        ini = self.directory / "pgbouncer.ini"
        ini.write_text(
            f"""[databases]
{dbs}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.directory / "users.txt"}
pool_mode = transaction
max_client_conn = 200
default_pool_size = 10
server_reset_query =
ignore_startup_parameters = {IGNORED_STARTUP_PARAMETERS}
logfile = {self.directory / "pgbouncer.log"}
pidfile = {self.directory / "pgbouncer.pid"}
"""
        )
        args = [executable, str(ini)]
        if os.geteuid() == 0:
            entry = pwd.getpwnam(PGBOUNCER_USER)
            os.chown(self.directory, entry.pw_uid, entry.pw_gid)
            for path in self.directory.iterdir():
                os.chown(path, entry.pw_uid, entry.pw_gid)
            args = [executable, "-u", PGBOUNCER_USER, str(ini)]
        self._process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                output = (
                    self._process.stdout.read().decode(errors="replace")
                    if (self._process.stdout)
                    else ""
                )
                raise RuntimeError(f"pgbouncer exited at start-up:\n{output}{self.log_tail()}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2),
            ):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"pgbouncer did not listen within 15 s:\n{self.log_tail()}")

    def log_tail(self) -> str:
        """The end of pgbouncer's log."""
        with contextlib.suppress(OSError):
            return "\n".join((self.directory / "pgbouncer.log").read_text().splitlines()[-20:])
        return ""

    def stop(self) -> None:
        """Stop pgbouncer and delete its directory."""
        process, self._process = self._process, None
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
            if process.stdout is not None:
                process.stdout.close()
        shutil.rmtree(self.directory, ignore_errors=True)


@contextlib.asynccontextmanager
async def database_behind_pgbouncer(
    postgres: TestPostgres, template: str, prefix: str
) -> AsyncIterator[str]:
    """A fresh database cloned from ``template``, reached only through pgbouncer: its DSN.

    Skips the test (saying why) where pgbouncer is missing or the server has
    no unix socket to front; drops the database afterwards.
    """
    if PgBouncer.executable() is None:
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer); CI installs it")
    parts = urlsplit(postgres.dsn)
    query = parse_qs(parts.query)
    socket_dir = query.get("host", [parts.hostname or ""])[0]
    if not socket_dir.startswith("/"):
        pytest.skip("the pgbouncer tests front the embedded server's unix socket")
    port = int(query.get("port", [str(parts.port or 5432)])[0])
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    await postgres.create_database(name, template=template)
    bouncer = await asyncio.to_thread(PgBouncer(socket_dir, port, [name]).start)
    try:
        yield bouncer.dsn(name)
    finally:
        await asyncio.to_thread(bouncer.stop)
        await postgres.drop_database(name)
