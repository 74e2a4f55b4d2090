"""Building SQL text: bound parameters, scope predicates, and the one quoting helper.

Values are always bound parameters (:class:`Params`). Scope values too: the
SQL text depends only on which levels are set, so PostgreSQL can use the
btree scope index (``IS NOT DISTINCT FROM`` could not) and asyncpg caches one
statement per shape. Only where PostgreSQL takes no parameter (DDL, comments,
index predicates the planner must read as constants) is a value written into
the text, through :func:`quote_literal` or :func:`quote_ident`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from memsvc.core.scope import Include, Scope

COLUMNS = ("tenant_id", "project_id", "agent_id", "session_id")

# Ends every CTE arm inserting rows selected from another arm (a memory's
# history event, an assembly's members), for Citus under row-level security.
# Citus runs such an INSERT ... SELECT from the coordinator: without
# RETURNING it sends the rows to the shard by COPY, which PostgreSQL refuses
# wherever policies apply ("COPY FROM not supported with row-level
# security"); with RETURNING it writes them to a file beside the shard and
# inserts them there by INSERT ... SELECT, which the policies check as any
# insert (a row of another tenant is refused). On one server nothing reads
# the arm's rows.
INSERT_ARM_RETURNING = "RETURNING 1"


class Params:
    """Positional parameters of one statement, numbered as they are added."""

    def __init__(self, *initial: object) -> None:
        self.values: list[object] = list(initial)

    def add(self, value: object) -> str:
        """Bind ``value``; returns its placeholder (``$n``)."""
        self.values.append(value)
        return f"${len(self.values)}"


def _levels_equal(
    scope: Scope, params: Params, prefix: str, upto: int, start: int = 0
) -> list[str]:
    conditions = []
    columns = COLUMNS[start : upto + 1]
    for column, value in zip(columns, scope.levels[start : upto + 1], strict=True):
        if value is None:
            conditions.append(f"{prefix}{column} IS NULL")
        else:
            conditions.append(f"{prefix}{column} = {params.add(value)}")
    return conditions


def scope_condition(scope: Scope, include: Include, params: Params, alias: str = "") -> str:
    """Rows in ``scope`` (exact), on its path upwards (ancestors), or below it (descendants).

    ``ancestors`` includes the scope itself and every scope obtained by
    clearing its deepest levels: a session sees its agent's, project's and
    tenant's rows, never a sibling session's. ``descendants`` includes the
    scope and everything nested under it.
    """
    prefix = f"{alias}." if alias else ""
    if include == "exact":
        return " AND ".join(_levels_equal(scope, params, prefix, 3))
    if include == "descendants":
        return " AND ".join(_levels_equal(scope, params, prefix, scope.depth))
    tenant = f"{prefix}tenant_id = {params.add(scope.tenant)}"
    alternatives = []
    for ancestor in scope.ancestors():
        levels = _levels_equal(ancestor, params, prefix, 3, start=1)
        alternatives.append("(" + " AND ".join(levels) + ")")
    return f"{tenant} AND ({' OR '.join(alternatives)})"


def tenant_or_any(param: str, tenant_filter: bool) -> str:
    """``tenant_id = param`` for one tenant; otherwise a no-op that keeps ``param`` typed.

    Two statement texts rather than ``param IS NULL OR tenant_id = param``:
    the OR form hides the tenant from the planner (and from Citus, which
    routes a statement to one shard only on a plain ``tenant_id = ...``).
    """
    return f"tenant_id = {param}::text" if tenant_filter else f"{param}::text IS NULL"


def quote_literal(text: str) -> str:
    """``text`` as an SQL string literal, as PostgreSQL's ``quote_literal`` writes it.

    Right under either ``standard_conforming_strings``: a text holding a
    backslash is written as an escape string (``E'...'``).
    """
    quoted = text.replace("'", "''")
    if "\\" in text:
        return "E'" + quoted.replace("\\", "\\\\") + "'"
    return "'" + quoted + "'"


def quote_ident(name: str) -> str:
    """``name`` as a quoted SQL identifier, as PostgreSQL's ``quote_ident`` would always quote."""
    return '"' + name.replace('"', '""') + '"'


def by_tenant(keys: Iterable[tuple[str, uuid.UUID]]) -> list[tuple[str, list[uuid.UUID]]]:
    """Row keys (tenant, id) grouped by tenant: tenants in name order, ids in order, once each.

    For statements that lock rows: Citus locks only by a statement routed to
    one shard (the tenant by equality), and key order keeps lockers from
    deadlocking.
    """
    grouped: dict[str, set[uuid.UUID]] = {}
    for tenant, row_id in keys:
        grouped.setdefault(tenant, set()).add(row_id)
    return [(tenant, sorted(grouped[tenant])) for tenant in sorted(grouped)]


def string_literals(text: str) -> list[str] | None:
    """The string literals of SQL text PostgreSQL deparsed, in order (None: one is unterminated).

    For reading values back out of an index predicate (``pg_get_expr``) with
    standard_conforming_strings on: ``''`` inside a literal is one quote.
    """
    values = []
    position = 0
    while (start := text.find("'", position)) >= 0:
        end = start + 1
        while True:
            end = text.find("'", end)
            if end < 0:
                return None
            if text.startswith("''", end):
                end += 2
                continue
            break
        values.append(text[start + 1 : end].replace("''", "'"))
        position = end + 1
    return values
