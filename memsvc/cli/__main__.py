"""``python -m memsvc.cli``: the same as ``memsvc``."""

from memsvc.cli.commands import main

main()
