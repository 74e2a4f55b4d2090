"""``python -m memsvc``: the same command as the ``memsvc`` script."""

from memsvc.cli import main

if __name__ == "__main__":
    main(prog_name="memsvc")
