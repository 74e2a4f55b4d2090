"""The ``memsvc`` command line.

May import: anything in memsvc (it is the top).
"""

from memsvc.cli import curation  # noqa: F401  (registers its commands on main)
from memsvc.cli.commands import main

__all__ = ["main"]
