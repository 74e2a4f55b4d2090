"""Alembic migrations of the memsvc schema (shipped as ``memsvc.migrations``)."""
