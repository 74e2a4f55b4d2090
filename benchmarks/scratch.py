"""Scratch directories for a benchmark run's database and files.

A benchmark's embedded PostgreSQL holds hundreds of megabytes; left in the
temporary directory after every run, a few dozen runs fill a disk. A scratch
directory is removed when the process that made it exits.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path


def scratch_dir(prefix: str) -> Path:
    """A new empty directory, removed with its contents when this process exits.

    Make it before starting a server in it: exit hooks run last registered
    first, so the embedded server's own hook stops it before the removal.
    """
    path = Path(tempfile.mkdtemp(prefix=prefix))
    owner = os.getpid()

    def remove() -> None:
        # Only the process that made it: a forked child exiting must not
        # remove a directory its parent still uses.
        if os.getpid() == owner:
            shutil.rmtree(path, ignore_errors=True)

    atexit.register(remove)
    return path
