"""Scratch directories for a benchmark run's database and files.

A benchmark's embedded PostgreSQL holds hundreds of megabytes; left in the
temporary directory after every run, a few dozen runs fill a disk. A scratch
directory is removed when the interpreter exits, after the embedded server
has stopped (its own exit hook, registered later, runs first).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path


def scratch_dir(prefix: str) -> Path:
    """A new empty directory, removed with its contents when the process exits."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path
