"""CHECK constraints keeping stored times within what Python can read.

Every time column memsvc reads back is constrained to the range of
:mod:`memsvc.core.time_limits`, so a row written from elsewhere (an import, a
script, psql) cannot hold a time that makes reads meeting it fail. The
LangGraph store's ``ttl_minutes``, which reads add to ``now()``, is bounded
by the longest duration memsvc accepts. Revision 0024 adds the constraints
(``NOT VALID`` where older rows break them); ``memsvc doctor --repair``
brings such rows into range and validates the constraints.
"""

from __future__ import annotations

from sqlalchemy import CheckConstraint, MetaData

from memsvc.core.time_limits import MAX_DURATION_DAYS, in_range_sql

# The time columns of each table whose rows memsvc reads.
TIME_COLUMNS: dict[str, tuple[str, ...]] = {
    "memories": (
        "created_at", "updated_at", "expires_at", "last_accessed_at", "valid_from", "valid_to",
        "forgotten_at", "last_reinforced_at",
    ),
    "memory_events": ("at", "committed_at"),
    "entity_events": ("at",),
    "assemblies": ("created_at", "updated_at"),
    "assembly_members": ("added_at",),
    "session_checkpoints": ("created_at",),
    "langgraph_checkpoints": ("created_at",),
    "langgraph_store_items": ("created_at", "updated_at", "expires_at"),
    "memory_policies": ("updated_at",),
}
# Columns whose time is an expiry: past the range, it means "never".
EXPIRY_COLUMNS = frozenset({("memories", "expires_at"), ("langgraph_store_items", "expires_at")})
MAX_TTL_MINUTES = MAX_DURATION_DAYS * 24 * 60
TTL_MINUTES_SQL = f"ttl_minutes > 0 AND ttl_minutes <= {MAX_TTL_MINUTES}"


def constraint_name(table: str, column: str) -> str:
    """The name of a column's range constraint (the metadata's ``ck`` convention)."""
    return f"ck_{table}_{column}_range"


def range_constraints() -> list[tuple[str, str, str]]:
    """``(table, constraint name, condition)`` of every range constraint."""
    found = [
        (table, constraint_name(table, column), in_range_sql(column))
        for table, columns in TIME_COLUMNS.items()
        for column in columns
    ]
    found.append(
        ("langgraph_store_items", constraint_name("langgraph_store_items", "ttl_minutes"),
         TTL_MINUTES_SQL)
    )
    return found


def add_range_checks(metadata: MetaData) -> None:
    """Declare the range constraints on the metadata's tables."""
    schema = metadata.schema
    for table, name, condition in range_constraints():
        key = f"{schema}.{table}" if schema else table
        short = name.removeprefix(f"ck_{table}_")  # the naming convention adds it back
        metadata.tables[key].append_constraint(CheckConstraint(condition, name=short))
