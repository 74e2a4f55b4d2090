"""Translation of driver exceptions into memsvc errors, by SQLSTATE and type."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

import asyncpg

from memsvc.core.errors import (
    ConcurrencyError,
    ConflictError,
    MemsvcError,
    SchemaError,
    StorageError,
    ValidationError,
)

# SQLSTATEs a retry can fix: serialization failure, deadlock, lock not available.
RETRYABLE_SQLSTATES = frozenset({"40001", "40P01", "55P03"})


def translate(exc: BaseException) -> MemsvcError:
    """Map a driver exception to the memsvc error a caller should see."""
    if isinstance(exc, MemsvcError):
        return exc
    if isinstance(exc, asyncpg.PostgresError):
        state: str = exc.sqlstate or ""
        detail = f"{type(exc).__name__} [{state}]: {exc}"
        if state == "23505":
            return ConflictError(f"duplicate value violates {exc.constraint_name}")
        if state in ("23503", "23514", "23502", "22P02", "22003", "22021", "54000"):
            field = getattr(exc, "constraint_name", None) or getattr(exc, "column_name", None)
            return ValidationError(field or "value", f"rejected by the database ({detail})")
        if state in RETRYABLE_SQLSTATES:
            return ConcurrencyError(f"concurrent transaction conflict, safe to retry ({detail})")
        if state in ("42P01", "3F000", "42703"):
            return SchemaError(
                f"schema is missing or not migrated; run `memsvc migrate` ({detail})"
            )
        if state == "57014":
            return StorageError(f"statement timed out or was cancelled ({detail})", sqlstate=state)
        return StorageError(f"database error: {detail}", sqlstate=state or None)
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return StorageError("timed out waiting for PostgreSQL")
    if isinstance(exc, asyncpg.InterfaceError | asyncpg.InternalClientError | OSError):
        return StorageError(f"PostgreSQL connection failed: {type(exc).__name__}: {exc}")
    raise exc  # not a driver error: a bug, let it surface unchanged


# What translate_errors translates (a memsvc error passes through unchanged).
DRIVER_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,
    TimeoutError,
)


@contextmanager
def translate_errors() -> Iterator[None]:
    """Re-raise driver exceptions inside the block as memsvc errors."""
    try:
        yield
    except MemsvcError:
        raise
    except DRIVER_ERRORS as exc:
        raise translate(exc) from exc


def connection_is_broken(exc: BaseException) -> bool:
    """Whether a failure leaves the connection unusable (it must not go back to a pool).

    A backend that was terminated, a reset socket or a timed-out read can
    leave the protocol mid-message: the next statement on it would fail
    with a confusing client error, so such connections are closed instead.
    """
    for error in (exc, exc.__cause__):
        if isinstance(
            error,
            asyncpg.InterfaceError | asyncpg.InternalClientError | OSError | TimeoutError,
        ):
            return True
        state = getattr(error, "sqlstate", None) or ""
        if state.startswith(("08", "57P0")):
            return True
    return False
