"""The embedded server's lifetime, with real processes: whoever starts or joins it
leaves no trace on exit, ``db stop`` leaves nothing behind, a SIGKILLed holder
does not keep it alive for ever, and an unusable data_dir is a StorageError.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import psutil
import pytest

from memsvc import MemoryService, Scope, Settings, StorageError
from memsvc.db.embedded import (
    RECORD_FILE,
    EmbeddedPostgres,
    Holder,
    ServerRecord,
    ensure_service_user,
    pgdata_path,
    running_postmaster_pid,
)

pytestmark = pytest.mark.timeout(240)

_HOLD = """
import sys
import tempfile
from memsvc.db.embedded import EmbeddedPostgres
server = EmbeddedPostgres(sys.argv[1])
print(server.start(), flush=True)
sys.stdin.readline()
if sys.argv[2] == "close":
    server.close()
# otherwise: leave at interpreter exit, as an app that never calls close()
"""


class HolderProcess:
    """A child process that starts (or joins) the server and holds it until told."""

    def __init__(self, data_dir: Path, *, close: bool = False) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _HOLD, str(data_dir), "close" if close else "exit"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=_env(data_dir),
        )
        assert self.process.stdout is not None
        self.dsn = self.process.stdout.readline().strip()
        assert self.dsn.startswith("postgresql://"), "the holder did not start the server"

    @property
    def pid(self) -> int:
        return self.process.pid

    def leave(self) -> None:
        """Let the process exit normally."""
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.flush()
        assert self.process.wait(timeout=60) == 0

    def kill(self) -> None:
        """SIGKILL: no close(), no atexit."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)


def _env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSVC_")}
    env["MEMSVC_DATA_DIR"] = str(data_dir)
    return env


def memsvc(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m memsvc ARGS`` on ``data_dir`` (the same command as the script)."""
    return subprocess.run(
        [sys.executable, "-m", "memsvc", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(data_dir),
        check=False,
    )


def assert_no_trace(data_dir: Path) -> None:
    """Server down, no holder record, no pid list of the wheel's."""
    assert running_postmaster_pid(data_dir) is None
    assert not (data_dir / RECORD_FILE).exists()
    assert not (pgdata_path(data_dir) / ".handle_pids.json").exists()
    status = memsvc(data_dir, "db", "status")
    assert status.returncode == 1 and status.stdout.startswith("not running"), status


@pytest.fixture(scope="module")
def shared_dir() -> Iterator[Path]:
    # One data directory for the module: initdb runs once. Not under pytest's
    # basetemp: any pytest starting on the machine resets that to mode 0700,
    # which the server's own user (when tests run as root) cannot traverse.
    directory = Path(tempfile.mkdtemp(prefix="memsvc-test-embedded-"))
    yield directory
    EmbeddedPostgres(directory).stop()
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def data_dir(shared_dir: Path) -> Iterator[Path]:
    """The module's data directory, the server down before and after the test."""
    EmbeddedPostgres(shared_dir).stop()
    yield shared_dir
    EmbeddedPostgres(shared_dir).stop()


def test_a_process_that_exits_without_close_leaves_no_trace(data_dir: Path) -> None:
    holder = HolderProcess(data_dir)  # starts the server
    record = json.loads((data_dir / RECORD_FILE).read_text())
    assert [h["pid"] for h in record["holders"]] == [holder.pid]
    holder.leave()
    assert_no_trace(data_dir)


def test_the_last_holder_stops_the_server_whoever_started_it(data_dir: Path) -> None:
    first = HolderProcess(data_dir)
    second = HolderProcess(data_dir, close=True)  # joins
    assert second.dsn == first.dsn
    first.leave()
    assert running_postmaster_pid(data_dir) is not None  # still held by the second
    second.leave()
    assert_no_trace(data_dir)


def test_psql_then_db_stop_leaves_nothing_behind(data_dir: Path) -> None:
    """The issue's sequence: use, psql, stop, use again, status -> not running."""
    used = HolderProcess(data_dir)
    used.leave()
    psql = memsvc(data_dir, "db", "psql", "-c", "select 1")
    assert psql.returncode == 0, psql.stderr
    stop = memsvc(data_dir, "db", "stop")
    assert stop.returncode == 0
    again = HolderProcess(data_dir)
    again.leave()
    assert_no_trace(data_dir)


def test_psql_gets_every_argument_and_holds_the_server_while_it_runs(data_dir: Path) -> None:
    holder = HolderProcess(data_dir)
    result = memsvc(data_dir, "db", "psql", "-t", "-A", "-c", "select 40 + 2")
    assert (result.returncode, result.stdout.strip()) == (0, "42"), result.stderr
    # psql's own exit code comes back (an error in the SQL: 1).
    failed = memsvc(data_dir, "db", "psql", "-v", "ON_ERROR_STOP=1", "-c", "select nonsense")
    assert failed.returncode != 0 and "nonsense" in failed.stderr
    # While psql runs, its pid is a holder; once it exits, only ours is left.
    slow = subprocess.Popen(
        [sys.executable, "-m", "memsvc", "db", "psql", "-c", "select pg_sleep(3)"],
        stdout=subprocess.DEVNULL,
        env=_env(data_dir),
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            held = {h.pid for h in EmbeddedPostgres(data_dir).holders()}
            children = {c.pid for c in psutil.Process(slow.pid).children()}
            if children & held:
                break
            time.sleep(0.1)
        else:
            pytest.fail("psql never showed up as a holder")
        assert {holder.pid, slow.pid} <= held
    finally:
        assert slow.wait(timeout=60) == 0
    assert {h.pid for h in EmbeddedPostgres(data_dir).holders()} == {holder.pid}
    holder.leave()
    assert_no_trace(data_dir)


def test_psql_on_a_stopped_server_starts_it_and_stops_it_again(data_dir: Path) -> None:
    result = memsvc(data_dir, "db", "psql", "-c", "select 1")
    assert result.returncode == 0, result.stderr
    assert_no_trace(data_dir)


def test_a_sigkilled_holder_does_not_keep_the_server_alive(data_dir: Path) -> None:
    killed = HolderProcess(data_dir)
    killed.kill()
    status = memsvc(data_dir, "db", "status")
    assert status.returncode == 0 and "held by processes: none" in status.stdout
    # The next process finds no live holder: it stops the server when it exits.
    nxt = HolderProcess(data_dir, close=True)
    record = json.loads((data_dir / RECORD_FILE).read_text())
    assert [h["pid"] for h in record["holders"]] == [nxt.pid]  # the dead pid is gone
    nxt.leave()
    assert_no_trace(data_dir)


def test_db_stop_leaves_nothing_behind_while_holders_live(data_dir: Path) -> None:
    holder = HolderProcess(data_dir, close=True)
    stop = memsvc(data_dir, "db", "stop", "--force")
    assert (stop.returncode, stop.stdout.strip()) == (0, "embedded PostgreSQL stopped")
    assert_no_trace(data_dir)
    holder.leave()  # its close() finds nothing to do and starts nothing
    assert_no_trace(data_dir)
    assert memsvc(data_dir, "db", "stop").stdout.strip() == "embedded PostgreSQL is not running"


_USE = """
import asyncio, logging, sys
logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
from memsvc import MemoryService, Scope
async def main():
    async with MemoryService.open() as service:
        await service.memories.count(Scope("t"))
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        try:
            await service.memories.count(Scope("t"))
        except Exception as exc:
            print(type(exc).__name__, flush=True)
asyncio.run(main())
"""


def test_db_stop_refuses_while_the_server_is_in_use_and_force_leaves_one_line_warnings(
    data_dir: Path,
) -> None:
    user = subprocess.Popen(
        [sys.executable, "-c", _USE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=_env(data_dir),
    )  # fmt: skip
    assert user.stdout is not None and user.stdout.readline().strip() == "ready"
    refused = memsvc(data_dir, "db", "stop")
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        f"Error: the embedded PostgreSQL is in use by processes {user.pid}: stop them "
        "first, or pass --force (they lose their connections)"
    )
    assert running_postmaster_pid(data_dir) is not None
    assert memsvc(data_dir, "db", "stop", "--force").returncode == 0
    time.sleep(4)  # the user's pool tries to reconnect after 1 s, then 2 s more
    output, errors = user.communicate("\n", timeout=60)
    assert output.strip() == "StorageError"  # its calls fail, with memsvc's error
    assert "Traceback" not in errors, errors
    retries = [line for line in errors.splitlines() if line.startswith("asyncpg.pool WARNING")]
    assert retries and all("Error" in line for line in retries), errors
    assert_no_trace(data_dir)


def test_db_start_keeps_the_server_after_its_users_leave(data_dir: Path) -> None:
    started = memsvc(data_dir, "db", "start")
    assert started.returncode == 0, started.stderr
    user = HolderProcess(data_dir)
    user.leave()
    status = memsvc(data_dir, "db", "status")
    assert status.returncode == 0 and status.stdout.startswith("running")
    assert memsvc(data_dir, "db", "stop").returncode == 0
    assert_no_trace(data_dir)


def test_a_reused_pid_is_not_mistaken_for_a_holder(tmp_path: Path) -> None:
    me = Holder.for_pid(os.getpid())
    assert me.alive
    # Same pid, another start time: a new process that got a dead holder's pid.
    impostor = Holder(me.pid, me.started - 3600, "old")
    gone = Holder(2**22 + 1, me.started, "gone")  # above Linux's pid_max
    record = ServerRecord(postmaster=None, stop_when_idle=True, holders=[impostor, gone, me])
    record.write(tmp_path / RECORD_FILE)
    assert ServerRecord.read(tmp_path / RECORD_FILE).live_holders() == [me]


# --------------------------------------------------------------------- data_dir


def _unusable_dirs(tmp_path: Path) -> dict[str, Path]:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    return {
        "a file": a_file,
        "under a file": a_file / "data",  # its parent can never be created
    }


@pytest.mark.parametrize("case", ["a file", "under a file"])
async def test_an_unusable_data_dir_is_a_storage_error_naming_the_setting(
    tmp_path: Path, case: str
) -> None:
    path = _unusable_dirs(tmp_path)[case]
    with pytest.raises(StorageError) as raised:
        await MemoryService.open(Settings(data_dir=path))
    assert "data_dir (MEMSVC_DATA_DIR)" in str(raised.value) and str(path) in str(raised.value)


async def test_a_data_dir_without_permission_is_a_storage_error(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.access(locked, os.W_OK):
        pytest.skip("running as root: permission bits do not stop this process")
    with pytest.raises(StorageError, match=r"data_dir \(MEMSVC_DATA_DIR\)"):
        await MemoryService.open(Settings(data_dir=locked / "data"))


@pytest.mark.parametrize("command", [("stats",), ("migrate",), ("db", "start"), ("db", "psql")])
@pytest.mark.parametrize("case", ["a file", "under a file"])
def test_the_cli_says_one_line_for_an_unusable_data_dir(
    tmp_path: Path, case: str, command: tuple[str, ...]
) -> None:
    path = _unusable_dirs(tmp_path)[case]
    result = memsvc(path, *command)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: StorageError: data_dir (MEMSVC_DATA_DIR)")
    assert str(path) in lines[0]


# Spaces (a home directory "John Smith"), both quotes, a shell's $ and
# backquote, non-ASCII letters; and a comma, which no DSN can carry in a
# socket path (the socket then goes to a directory of its own).
AWKWARD_NAMES = ["John Smith's \"data\" $HOME `x` Zoë", "Smith, John & Zoë #1"]


@pytest.fixture(params=AWKWARD_NAMES)
def awkward_dir(request: pytest.FixtureRequest) -> Iterator[Path]:
    parent = Path(tempfile.mkdtemp(prefix="memsvc test "))
    directory = parent / request.param / ".memsvc"
    yield directory
    EmbeddedPostgres(directory).stop()
    shutil.rmtree(parent, ignore_errors=True)


async def test_a_data_dir_with_spaces_quotes_and_non_ascii_runs_the_server(
    awkward_dir: Path,
) -> None:
    settings = Settings(data_dir=awkward_dir, embedding_dim=8)
    async with MemoryService.open(settings) as service:
        memory = await service.memories.add(Scope("t"), "stored", embedding=[1.0] * 8)
        assert await service.memories.get(memory.id) == memory
        assert running_postmaster_pid(awkward_dir) is not None
        if "," not in str(awkward_dir):  # the socket sits in the awkward path itself
            assert quote(str(pgdata_path(awkward_dir)), safe="/") in service.dsn
        holder = HolderProcess(awkward_dir)  # another process joins it
        assert holder.dsn == service.dsn
        count = "select count(*) from memsvc.memories"
        psql = memsvc(awkward_dir, "db", "psql", "-t", "-A", "-c", count)
        assert (psql.returncode, psql.stdout.strip()) == (0, "1"), psql.stderr
        holder.leave()
    assert_no_trace(awkward_dir)


@pytest.mark.skipif(
    sys.platform == "win32" or os.geteuid() != 0 or shutil.which("useradd") is None,
    reason="creates an OS user: needs root and useradd",
)
def test_run_as_root_the_server_user_is_created_without_a_login_shell() -> None:
    import pwd

    name = f"memsvc_t{os.getpid()}"  # not the real one: other servers run as it
    try:
        ensure_service_user(name)
        entry = pwd.getpwnam(name)
        assert entry.pw_shell in ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false")
        assert entry.pw_uid < 1000  # a system user
        ensure_service_user(name)  # an existing user is left as it is
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)
