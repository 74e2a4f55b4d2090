"""Errors raised by memsvc.

Every failure a caller can see is a :class:`MemsvcError`. Driver exceptions
(asyncpg, redis-py, SQLAlchemy) are translated at the edge, by SQLSTATE or
exception type, never by message text; the original is kept as ``__cause__``.
"""

from __future__ import annotations

from datetime import datetime


class MemsvcError(Exception):
    """Something went wrong in memsvc."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class ValidationError(MemsvcError, ValueError):
    """Input was rejected before anything was written."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.reason = message
        super().__init__(f"{field}: {message}")


class NotFoundError(MemsvcError, LookupError):
    """The requested row does not exist (or is not visible to this scope)."""


class ConflictError(MemsvcError):
    """The write conflicts with existing data (duplicate key or stale version)."""


class ConcurrencyError(MemsvcError):
    """A concurrent transaction got in the way; retrying the call is safe."""

    retryable = True


class StorageError(MemsvcError):
    """The database failed to carry out the operation.

    ``sqlstate`` holds the PostgreSQL error code when the server sent one.
    """

    def __init__(self, message: str | None = None, *, sqlstate: str | None = None) -> None:
        self.sqlstate = sqlstate
        super().__init__(message)


class CitusUnsupportedError(MemsvcError):
    """The operation cannot run on a Citus cluster; the message says which and why.

    ``operation`` names it (``"changes"``, ...), ``reason`` says why, and
    what to do instead where there is something.
    """

    def __init__(self, operation: str, reason: str) -> None:
        self.operation = operation
        self.reason = reason
        super().__init__(f"{operation} is not supported on Citus: {reason}")


class CursorExpiredError(MemsvcError):
    """The change feed cursor is older than the events gc kept.

    Changes after it were removed (``Settings.change_retention_days``), so
    resuming from it would silently skip them. Rebuild the consumer's state
    from the current data, then follow ``svc.changes(since="now")``.
    """


class FeedEpochError(CursorExpiredError):
    """The change feed cursor belongs to an earlier epoch of the feed.

    The database was restored into another PostgreSQL cluster (``pg_dump`` /
    ``pg_restore``, or any copy whose transaction ids start afresh), and
    positions of one epoch mean nothing in the next. Resume with
    ``svc.changes(since=<datetime>)``: the ``at`` of the last change you
    processed, less the longest your writing transactions run (changes from
    then on, some of them again), or with ``since=None`` (every change still
    retained). ``cursor_epoch`` and ``current_epoch`` name the two epochs;
    ``epoch_started_at`` is when the current one began.
    """

    def __init__(
        self,
        message: str | None = None,
        *,
        cursor_epoch: str | None = None,
        current_epoch: str | None = None,
        epoch_started_at: datetime | None = None,
    ) -> None:
        self.cursor_epoch = cursor_epoch
        self.current_epoch = current_epoch
        self.epoch_started_at = epoch_started_at
        super().__init__(message)


class SchemaError(MemsvcError):
    """The database schema is missing, not migrated, or does not match the settings."""


class WorkingMemoryError(MemsvcError):
    """The working-memory store (Redis) failed or is unreachable."""


class RedisUnavailableError(WorkingMemoryError):
    """Redis did not answer, and the operation must reach it (never the fallback store).

    Raised by erasure and by removals from working memory (``clear``,
    ``delete``, ``clear_scratchpad``) when the service runs on the in-process
    fallback store and Redis stays unreachable for the bounded retry. Nothing
    was removed; run the operation again once Redis answers.
    """


class EmbeddingError(MemsvcError):
    """The embedder failed to turn texts into vectors.

    ``status`` holds the HTTP status when a remote embedding service answered
    with an error; ``retryable`` says whether calling again may succeed.
    """

    def __init__(
        self, message: str | None = None, *, status: int | None = None, retryable: bool = False
    ) -> None:
        self.status = status
        self.retryable = retryable
        super().__init__(message)


class ExtractionError(MemsvcError):
    """An extractor or summarizer could not answer (the model's endpoint failed).

    Raised when the endpoint cannot be reached, times out, or answers with
    an HTTP error after the retries; ``status`` holds the HTTP status when
    there was one and ``retryable`` says whether calling again may succeed.
    An answer that arrives but is unusable (not JSON, wrong schema) is no
    error: ``remember`` rejects it with a reason and applies nothing of it.
    """

    def __init__(
        self, message: str | None = None, *, status: int | None = None, retryable: bool = False
    ) -> None:
        self.status = status
        self.retryable = retryable
        super().__init__(message)
