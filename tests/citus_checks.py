"""What Citus needs of memsvc's schema and SQL, as checks that return the problems found.

Used by ``tests/test_citus_ready.py``. Schema checks read the migrated
catalog (``pg_catalog``); the statement check parses SQL text with
PostgreSQL's own parser (pglast) and looks, for every reference to a tenant
table, for a ``tenant_id`` condition the rows must meet.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from pglast import ast, parse_sql
from pglast.enums import A_Expr_Kind, BoolExprType, SubLinkType

TENANT_COLUMN = "tenant_id"

# --------------------------------------------------------------------- schema

KEYS_SQL = """
SELECT c.relname AS table_name, k.conname AS name, k.contype AS kind,
       ARRAY(SELECT a.attname::text FROM unnest(k.conkey) AS n(attnum)
             JOIN pg_attribute AS a ON a.attrelid = k.conrelid AND a.attnum = n.attnum)
           AS columns,
       r.relname AS referenced_table,
       ARRAY(SELECT a.attname::text FROM unnest(k.confkey) AS n(attnum)
             JOIN pg_attribute AS a ON a.attrelid = k.confrelid AND a.attnum = n.attnum)
           AS referenced_columns,
       -- the referenced column paired with each column, in constraint order
       ARRAY(SELECT ra.attname::text
             FROM unnest(k.conkey, k.confkey) AS p(attnum, ref_attnum)
             JOIN pg_attribute AS ra ON ra.attrelid = k.confrelid AND ra.attnum = p.ref_attnum
             JOIN pg_attribute AS la ON la.attrelid = k.conrelid AND la.attnum = p.attnum
             WHERE la.attname = 'tenant_id') AS tenant_pairs
FROM pg_constraint AS k
JOIN pg_class AS c ON c.oid = k.conrelid
JOIN pg_namespace AS ns ON ns.oid = c.relnamespace
LEFT JOIN pg_class AS r ON r.oid = k.confrelid
WHERE ns.nspname = $1 AND c.relname = ANY($2::text[]) AND k.contype IN ('p', 'u', 'f')
ORDER BY 1, 2"""

UNIQUE_INDEXES_SQL = """
SELECT t.relname AS table_name, ix.relname AS name,
       ARRAY(SELECT a.attname::text FROM unnest(i.indkey) AS n(attnum)
             JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = n.attnum)
           AS columns
FROM pg_index AS i
JOIN pg_class AS t ON t.oid = i.indrelid
JOIN pg_class AS ix ON ix.oid = i.indexrelid
JOIN pg_namespace AS ns ON ns.oid = t.relnamespace
WHERE ns.nspname = $1 AND t.relname = ANY($2::text[]) AND i.indisunique
ORDER BY 1, 2"""

POLICIES_SQL = """
SELECT c.relname AS table_name, p.polname AS name,
       pg_get_expr(p.polqual, p.polrelid) AS using_sql,
       pg_get_expr(p.polwithcheck, p.polrelid) AS check_sql
FROM pg_policy AS p
JOIN pg_class AS c ON c.oid = p.polrelid
JOIN pg_namespace AS ns ON ns.oid = c.relnamespace
WHERE ns.nspname = $1 AND c.relname = ANY($2::text[])
ORDER BY 1, 2"""

TABLES_WITH_TENANT_SQL = """
SELECT c.relname FROM pg_attribute AS a
JOIN pg_class AS c ON c.oid = a.attrelid
JOIN pg_namespace AS ns ON ns.oid = c.relnamespace
WHERE ns.nspname = $1 AND c.relkind IN ('r', 'p') AND a.attname = 'tenant_id'
  AND NOT a.attisdropped
  -- A partition (tenant partitioning) is part of its parent's table: Citus
  -- distributes the parent and with it every partition.
  AND NOT c.relispartition
ORDER BY 1"""


async def tables_with_tenant_column(conn: asyncpg.Connection, schema: str) -> list[str]:
    """The tables of ``schema`` that have a ``tenant_id`` column."""
    return [row["relname"] for row in await conn.fetch(TABLES_WITH_TENANT_SQL, schema)]


async def key_problems(
    conn: asyncpg.Connection, schema: str, tables: Sequence[str]
) -> list[str]:
    """Keys, unique indexes and foreign keys of ``tables`` that Citus could not distribute.

    Every primary key, unique constraint and unique index must include
    ``tenant_id`` (a shard can only enforce uniqueness of rows it holds);
    every foreign key must pair ``tenant_id`` with the referenced table's
    ``tenant_id`` (co-located tables: the referenced row is on the same node).
    """
    problems = []
    for row in await conn.fetch(KEYS_SQL, schema, list(tables)):
        where = f"{row['table_name']}.{row['name']}"
        if TENANT_COLUMN not in row["columns"]:
            problems.append(f"{where}: key ({', '.join(row['columns'])}) lacks tenant_id")
        elif row["kind"] == "f" and list(row["tenant_pairs"]) != [TENANT_COLUMN]:
            problems.append(
                f"{where}: foreign key pairs tenant_id with "
                f"{row['referenced_table']}.{row['tenant_pairs']}, not its tenant_id"
            )
    for row in await conn.fetch(UNIQUE_INDEXES_SQL, schema, list(tables)):
        # An expression column reads as no name: it cannot be tenant_id.
        if TENANT_COLUMN not in row["columns"]:
            problems.append(
                f"{row['table_name']}.{row['name']}: unique index "
                f"({', '.join(row['columns'])}) lacks tenant_id"
            )
    return problems


async def policy_problems(
    conn: asyncpg.Connection, schema: str, tables: Sequence[str]
) -> list[str]:
    """Row-level-security policies of ``tables`` that read a column other than tenant_id.

    Citus applies a policy correctly only when it keys on the distribution
    column (citus issue 7182); a table without any policy is a problem too.
    """
    problems = []
    covered = set()
    for row in await conn.fetch(POLICIES_SQL, schema, list(tables)):
        covered.add(row["table_name"])
        for clause in ("using_sql", "check_sql"):
            if row[clause] is None:
                continue
            columns = expression_columns(row[clause])
            if columns != {TENANT_COLUMN}:
                problems.append(
                    f"{row['table_name']}.{row['name']}: policy reads "
                    f"{sorted(columns)} ({row[clause]})"
                )
    problems.extend(f"{table}: no row-level-security policy" for table in tables
                    if table not in covered)
    return problems


def expression_columns(expression: str) -> set[str]:
    """The column names an SQL expression reads."""
    (statement,) = parse_sql(f"SELECT {expression}")
    return {
        _column_name(node)
        for node in _walk(statement.stmt)
        if isinstance(node, ast.ColumnRef) and _column_name(node)
    }


# ----------------------------------------------------------------- statements


@dataclass
class Reference:
    """One mention of a tenant table in a statement."""

    table: str
    alias: str | None


@dataclass
class Level:
    """One query level: the tables it reads or writes and the conditions on its rows."""

    references: list[Reference] = field(default_factory=list)
    conditions: list[Any] = field(default_factory=list)


def statement_problems(sql: str, schema: str, tenant_tables: Sequence[str]) -> list[str]:
    """Why ``sql`` does not confine each tenant table it touches to given tenants.

    Rules, per reference to a tenant table (one query level at a time: a
    SELECT, UPDATE or DELETE, each CTE and subquery on its own):

    - SELECT, UPDATE and DELETE: an AND-ed condition of the level's WHERE
      (or of a JOIN's ON) equates the reference's ``tenant_id`` to something:
      a parameter (``tenant_id = $1``, ``= ANY($1)``, ``IN (...)``) or another
      row's ``tenant_id`` (a join or a correlated subquery on the tenant, which
      Citus runs co-located). A condition inside OR or NOT does not count:
      ``$2 IS NULL OR tenant_id = $2`` reads every tenant when $2 is NULL.
    - INSERT and COPY FROM: the column list names ``tenant_id``.
    - Any other statement on a tenant table (TRUNCATE, COPY TO, ...) fails.

    Returns an empty list when the statement is fine (or touches no tenant table).
    """
    names = set(tenant_tables)
    problems = []
    for raw in parse_sql(sql):
        for node in _walk(raw.stmt):
            if isinstance(node, ast.InsertStmt | ast.CopyStmt):
                target = node.relation
                if target is None or not _is_tenant_table(target, schema, names):
                    continue
                if isinstance(node, ast.CopyStmt) and not node.is_from:
                    problems.append(f"COPY {target.relname} TO reads every tenant")
                    continue
                if isinstance(node, ast.CopyStmt):
                    # COPY without a column list writes every column, tenant_id included.
                    listed = node.attlist or ()
                    columns = {_string(c) for c in listed} if listed else {TENANT_COLUMN}
                else:
                    columns = {target.name for target in node.cols or ()}
                if TENANT_COLUMN not in columns:
                    problems.append(f"write to {target.relname} names no tenant_id column")
            elif isinstance(node, ast.SelectStmt | ast.UpdateStmt | ast.DeleteStmt):
                level = _level(node, schema, names)
                for reference in level.references:
                    if not any(_confines(c, reference, level) for c in level.conditions):
                        shown = reference.alias or reference.table
                        problems.append(
                            f"{reference.table} (as {shown}) is not confined by tenant_id"
                        )
            elif isinstance(node, ast.TruncateStmt | ast.LockStmt):
                for relation in node.relations or ():
                    if _is_tenant_table(relation, schema, names):
                        problems.append(f"{type(node).__name__} on {relation.relname}")
    return problems


def _walk(node: Any) -> Iterator[Any]:
    """Every node of a parse tree, depth first."""
    if isinstance(node, list | tuple):
        for item in node:
            yield from _walk(item)
        return
    if not isinstance(node, ast.Node):
        return
    yield node
    for name in node:
        yield from _walk(getattr(node, name))


def _is_tenant_table(relation: ast.RangeVar, schema: str, names: set[str]) -> bool:
    return relation.relname in names and relation.schemaname in (None, schema)


def _level(node: Any, schema: str, names: set[str]) -> Level:
    """The tenant-table references of one query level and the conditions that bind them."""
    level = Level()
    if isinstance(node, ast.SelectStmt):
        from_items = list(node.fromClause or ())
    elif isinstance(node, ast.UpdateStmt):
        from_items = [node.relation, *(node.fromClause or ())]
    else:
        from_items = [node.relation, *(node.usingClause or ())]
    _add_conjuncts(node.whereClause, level.conditions)
    while from_items:
        item = from_items.pop()
        if isinstance(item, ast.RangeVar):
            if _is_tenant_table(item, schema, names):
                alias = item.alias.aliasname if item.alias else None
                level.references.append(Reference(item.relname, alias))
        elif isinstance(item, ast.JoinExpr):
            from_items.extend([item.larg, item.rarg])
            _add_conjuncts(item.quals, level.conditions)
    return level


def _add_conjuncts(condition: Any, into: list[Any]) -> None:
    if condition is None:
        return
    if isinstance(condition, ast.BoolExpr) and condition.boolop == BoolExprType.AND_EXPR:
        for arg in condition.args:
            _add_conjuncts(arg, into)
    else:
        into.append(condition)


def _string(node: Any) -> str:
    return node.sval if isinstance(node, ast.String) else ""


def _column_name(node: ast.ColumnRef) -> str:
    last = node.fields[-1]
    return last.sval if isinstance(last, ast.String) else ""


def _qualifier(node: ast.ColumnRef) -> str | None:
    if len(node.fields) < 2:
        return None
    qualifier = node.fields[-2]
    return qualifier.sval if isinstance(qualifier, ast.String) else None


def _names_reference(column: Any, reference: Reference, level: Level) -> bool:
    """Is ``column`` the ``tenant_id`` of ``reference``?"""
    if not isinstance(column, ast.ColumnRef) or _column_name(column) != TENANT_COLUMN:
        return False
    qualifier = _qualifier(column)
    if qualifier is None:
        # Unqualified: PostgreSQL accepts it only when one table of the level
        # (or, for a correlated subquery, of an outer level) has the column.
        return len(level.references) == 1
    return qualifier == (reference.alias or reference.table)


def _tenant_side(expression: Any, reference: Reference, level: Level) -> bool:
    if _names_reference(expression, reference, level):
        return True
    # (tenant_id, id) IN (...) / = ANY(...): a row whose fields include it.
    return isinstance(expression, ast.RowExpr) and any(
        _names_reference(arg, reference, level) for arg in expression.args
    )


def _confines(condition: Any, reference: Reference, level: Level) -> bool:
    """Does ``condition`` (one AND-ed term) tie the reference's tenant_id to given tenants?"""
    if isinstance(condition, ast.A_Expr):
        operator = condition.name[-1].sval if condition.name else ""
        if condition.kind in (A_Expr_Kind.AEXPR_OP, A_Expr_Kind.AEXPR_OP_ANY) and operator == "=":
            if condition.kind == A_Expr_Kind.AEXPR_OP_ANY:
                return _tenant_side(condition.lexpr, reference, level)
            left, right = condition.lexpr, condition.rexpr
            # The other side must come from elsewhere: tenant_id = tenant_id binds nothing.
            return (
                _tenant_side(left, reference, level)
                and not _tenant_side(right, reference, level)
            ) or (
                _tenant_side(right, reference, level)
                and not _tenant_side(left, reference, level)
            )
        if condition.kind == A_Expr_Kind.AEXPR_IN and operator == "=":
            return _tenant_side(condition.lexpr, reference, level)
        return False
    if isinstance(condition, ast.SubLink) and condition.subLinkType == SubLinkType.ANY_SUBLINK:
        return _tenant_side(condition.testexpr, reference, level)
    return False
