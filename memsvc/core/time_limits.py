"""The times and durations memsvc accepts, and why they are bounded.

PostgreSQL's ``timestamptz`` runs from 4713 BC to 294276 AD, plus
``±infinity``; Python's ``datetime`` from year 1 to 9999 (and asyncpg reads
``±infinity`` as *naive* ``datetime.min``/``max``). A stored time outside
Python's range cannot be read at all, so one such row would make every read
that meets it fail. memsvc therefore accepts only times in
``[EARLIEST, LATEST]`` (0001-01-02 to 9999-12-30 UTC): a day inside
Python's range at each end, so a time converted to any UTC offset (at most
a day, in ``datetime``) still exists. Durations (TTLs, retention periods)
are positive and at most ``MAX_DURATION`` (365,000 days, about 999 years),
so that now plus any of them stays before ``LATEST`` for centuries to come.

The database enforces the same range with CHECK constraints on the tables'
time columns (``time_range_check``), for rows that come from elsewhere
(imports, SQL); ``memsvc doctor`` finds rows from before the constraints and
``--repair`` brings them into range.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from memsvc.core.errors import ValidationError

EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
LATEST = datetime(9999, 12, 30, 23, 59, 59, 999_999, tzinfo=UTC)
MAX_DURATION = timedelta(days=365_000)
MAX_DURATION_SECONDS = MAX_DURATION.total_seconds()
MAX_DURATION_DAYS = MAX_DURATION.days

# The same bounds as SQL literals (timestamptz constants folded at DDL time).
EARLIEST_SQL = "'0001-01-02 00:00:00+00'"
LATEST_SQL = "'9999-12-30 23:59:59.999999+00'"
RANGE_TEXT = "0001-01-02T00:00:00Z to 9999-12-30T23:59:59.999999Z"


def in_range_sql(column: str) -> str:
    """A condition true when ``column`` is NULL or within the accepted range."""
    return f"{column} BETWEEN {EARLIEST_SQL} AND {LATEST_SQL}"


def validate_time(value: object, field: str) -> datetime:
    """Check a timezone-aware datetime within ``[EARLIEST, LATEST]``; returns it."""
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ValidationError(field, "must be a timezone-aware datetime")
    try:
        in_utc = value.astimezone(UTC)
    except OverflowError:
        in_utc = None  # its UTC time falls outside year 1..9999
    if in_utc is None or not EARLIEST <= in_utc <= LATEST:
        raise ValidationError(field, f"must be within {RANGE_TEXT}")
    return value


def validate_duration(value: object, field: str, unit: str = "seconds", hint: str = "") -> float:
    """Check a positive duration: a number of ``unit`` or a timedelta; returns ``unit``s.

    ``unit`` is ``"seconds"``, ``"minutes"`` or ``"days"``. At most
    ``MAX_DURATION``; NaN, infinity and bools are refused. ``hint`` ends the
    message of a duration over the limit.
    """
    scale = {"seconds": 1.0, "minutes": 60.0, "days": 86_400.0}[unit]
    if isinstance(value, timedelta):
        value = value.total_seconds() / scale
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(field, f"must be a number of {unit} or a timedelta")
    # An int is finite however large; math.isfinite would overflow on it.
    if (isinstance(value, float) and not math.isfinite(value)) or value <= 0:
        raise ValidationError(field, f"must be a positive number of {unit}")
    limit = MAX_DURATION_SECONDS / scale
    if value > limit:
        raise ValidationError(
            field,
            f"must be at most {limit:,.0f} {unit} ({MAX_DURATION_DAYS:,} days){hint}",
        )
    return float(value)
