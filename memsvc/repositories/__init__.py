"""Repositories: every SQL statement memsvc runs lives in this package."""
