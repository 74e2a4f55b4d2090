"""``python -m memsvc.cli``: the same as ``memsvc``."""

from memsvc.cli import main

main()
