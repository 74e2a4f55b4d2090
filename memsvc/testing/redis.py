"""Private ``redis-server`` processes for tests: a single server or a 3-node cluster.

Tests never use a shared Redis: each run starts its own servers on free
loopback ports, with persistence off, in a temporary directory, and can kill
them (SIGKILL) to test failure handling. The fixtures at the bottom are
registered through the ``memsvc.testing`` pytest plugin.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType

import pytest

__all__ = ["RedisCluster", "RedisServer", "redis_server_factory", "redis_url"]

_START_TIMEOUT_S = 10.0
_HOST = "127.0.0.1"
_CLUSTER_NODE_ARGS = (
    "--cluster-enabled", "yes",
    "--cluster-config-file", "nodes.conf",
    "--cluster-node-timeout", "5000",
)  # fmt: skip


class RedisServerError(RuntimeError):
    """A private redis-server could not be started."""


def find_executable(name: str) -> str:
    """Return the path of ``name`` on PATH, or raise a clear error."""
    path = shutil.which(name)
    if path is None:
        raise RedisServerError(
            f"{name} was not found on PATH; install Redis (e.g. the redis-server "
            "package) or set MEMSVC_TEST_REDIS_URL to a server the tests may flush"
        )
    return path


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((_HOST, port))
        except OSError:
            return False
    return True


def free_port(*, with_cluster_bus: bool = False) -> int:
    """Pick a free loopback port (and, for cluster nodes, a free port + 10000)."""
    if not with_cluster_bus:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((_HOST, 0))
            return int(sock.getsockname()[1])
    # A cluster node also listens on port + 10000 (the cluster bus), so the
    # kernel's ephemeral pick is no good: choose from a range where both fit.
    for _ in range(200):
        port = random.randint(20_000, 45_000)
        if _port_is_free(port) and _port_is_free(port + 10_000):
            return port
    raise RedisServerError("no free loopback port pair for a cluster node")


def _ping(port: int, timeout: float = 0.5) -> bool:
    # A raw RESP PING keeps this module free of any client library state.
    try:
        with socket.create_connection((_HOST, port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One private ``redis-server`` on a loopback port, without persistence.

    Example:
        with RedisServer() as server:
            client = redis.asyncio.Redis.from_url(server.url)
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        extra_args: tuple[str, ...] = (),
        executable: str | None = None,
    ) -> None:
        self._requested_port = port
        self._port: int | None = port
        self._extra_args = extra_args
        self._executable = executable
        self._process: subprocess.Popen[bytes] | None = None
        self._dir: Path | None = None

    # --- properties ---------------------------------------------------------
    @property
    def port(self) -> int:
        """The TCP port (fixed after the first start, reused by restart)."""
        if self._port is None:
            raise RedisServerError("the server has not been started")
        return self._port

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://{_HOST}:{self.port}/0"

    @property
    def pid(self) -> int:
        """Process id of the running server."""
        if self._process is None:
            raise RedisServerError("the server is not running")
        return self._process.pid

    @property
    def running(self) -> bool:
        """True while the server process is alive."""
        return self._process is not None and self._process.poll() is None

    @property
    def directory(self) -> Path:
        """The server's working directory (logs, cluster config)."""
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="memsvc-redis-"))
        return self._dir

    # --- lifecycle ----------------------------------------------------------
    def start(self) -> RedisServer:
        """Start the server (on a free port the first time) and wait for PING."""
        if self.running:
            return self
        executable = self._executable or find_executable("redis-server")
        attempts = 3 if self._requested_port is None else 1
        for attempt in range(attempts):
            if self._port is None or (attempt and self._requested_port is None):
                # Cluster nodes also need port + 10000 free for the cluster bus.
                self._port = free_port(with_cluster_bus="--cluster-enabled" in self._extra_args)
            try:
                self._spawn(executable)
                return self
            except RedisServerError:
                # Another process may have taken the port between the pick and
                # the bind; try a fresh port unless the caller fixed one.
                if attempt == attempts - 1:
                    raise
        return self

    def _spawn(self, executable: str) -> None:
        log_path = self.directory / "redis.log"
        args = [
            executable,
            "--port", str(self.port),
            "--bind", _HOST,
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.directory),
            "--daemonize", "no",
            "--logfile", str(log_path),
            *self._extra_args,
        ]  # fmt: skip
        self._process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self._process = None
                raise RedisServerError(
                    f"redis-server exited during start-up:\n{self._log_tail(log_path)}"
                )
            if _ping(self.port):
                return
            time.sleep(0.02)
        self.kill()
        raise RedisServerError(f"redis-server did not answer PING within {_START_TIMEOUT_S}s")

    @staticmethod
    def _log_tail(path: Path) -> str:
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-20:])
        except OSError:
            return "(no log)"

    def kill(self) -> None:
        """SIGKILL the server and wait for it to exit (data is lost)."""
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def restart(self) -> RedisServer:
        """Kill the server and start an empty one on the same port."""
        self.kill()
        return self.start()

    def stop(self) -> None:
        """Stop the server and delete its directory."""
        process, self._process = self._process, None
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class RedisCluster:
    """A private 3-master Redis Cluster (no replicas) on loopback ports.

    ``url`` names one node; cluster clients discover the others from it.
    """

    def __init__(self, masters: int = 3) -> None:
        if masters < 3:
            raise ValueError("redis-cli --cluster create needs at least 3 masters")
        self._masters = masters
        self.nodes: list[RedisServer] = []

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0`` of the first node."""
        if not self.nodes:
            raise RedisServerError("the cluster has not been started")
        return self.nodes[0].url

    @property
    def ports(self) -> list[int]:
        """The client ports of every node."""
        return [node.port for node in self.nodes]

    def start(self) -> RedisCluster:
        """Start the nodes, join them and wait until every slot is served."""
        cli = find_executable("redis-cli")
        try:
            for _ in range(self._masters):
                node = RedisServer(extra_args=_CLUSTER_NODE_ARGS)
                self.nodes.append(node.start())
            addresses = [f"{_HOST}:{port}" for port in self.ports]
            create = ["--cluster", "create", *addresses, "--cluster-replicas", "0"]
            result = subprocess.run(
                [cli, *create, "--cluster-yes"],
                capture_output=True,
                timeout=60,
                check=False,
            )
            if result.returncode != 0:
                raise RedisServerError(
                    "redis-cli --cluster create failed:\n"
                    + result.stdout.decode(errors="replace")
                    + result.stderr.decode(errors="replace")
                )
            self._wait_until_ok(cli)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_ok(self, cli: str) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            states = [
                subprocess.run(
                    [cli, "-h", _HOST, "-p", str(port), "cluster", "info"],
                    capture_output=True,
                    timeout=5,
                    check=False,
                ).stdout
                for port in self.ports
            ]
            if all(b"cluster_state:ok" in state for state in states):
                return
            time.sleep(0.1)
        raise RedisServerError("the cluster did not reach cluster_state:ok within 30s")

    def stop(self) -> None:
        """Stop every node."""
        for node in self.nodes:
            node.stop()
        self.nodes = []

    def __enter__(self) -> RedisCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# --- pytest fixtures ----------------------------------------------------------


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of a Redis the tests may use: ``MEMSVC_TEST_REDIS_URL`` or a private server.

    The server is shared by the whole session; flushing it between tests is
    the caller's job.
    """
    configured = os.environ.get("MEMSVC_TEST_REDIS_URL")
    if configured:
        yield configured
        return
    with RedisServer() as server:
        yield server.url


@pytest.fixture
def redis_server_factory() -> Iterator[Callable[[], RedisServer]]:
    """Start private servers that a test may kill; all are stopped afterwards."""
    started: list[RedisServer] = []

    def start() -> RedisServer:
        server = RedisServer().start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
