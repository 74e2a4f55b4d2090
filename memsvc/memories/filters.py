"""Metadata filters (``where=``) compiled to SQL over the ``metadata`` jsonb column.

Supported, on top-level keys, combined with AND::

    {"kind": "preference"}               equality (JSON equality; 1 == 1.0)
    {"kind": {"$eq": x}} / {"$ne": x}     equal / not equal (missing counts as not equal)
    {"tag": {"$in": [..]}} / {"$nin": [..]}
    {"score": {"$gt": 1}}  $gte $lt $lte  numbers compared as numbers
    {"done": {"$exists": true}}

Keys and values are bound parameters; no user string enters the SQL text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from memsvc.core.errors import ValidationError
from memsvc.core.validation import encode_json
from memsvc.db.sql import Params

_COMPARISONS = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
_OPERATORS = {"$eq", "$ne", "$in", "$nin", "$exists", *_COMPARISONS}
MAX_FILTER_BYTES = 64 * 1024


def _json(value: Any, field: str) -> str:
    return encode_json(field, value, MAX_FILTER_BYTES)


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    # An int is finite however large (math.isfinite would overflow on it).
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def _equals(column: str, key: str, value: Any, params: Params, field: str) -> str:
    if isinstance(value, dict | list):
        # Containment on arrays/objects is not equality; compare the values.
        # coalesce: a missing key compares as NULL, which must mean "not equal".
        test = f"({column} -> {params.add(key)}) = {params.add(_json(value, field))}::jsonb"
        return f"coalesce({test}, false)"
    return f"{column} @> {params.add(_json({key: value}, field))}::jsonb"


def _operator(column: str, key: str, op: str, operand: Any, params: Params) -> str:
    field = f"where.{key}.{op}"
    if op == "$eq":
        return _equals(column, key, operand, params, field)
    if op == "$ne":
        return f"NOT ({_equals(column, key, operand, params, field)})"
    if op in ("$in", "$nin"):
        if not isinstance(operand, list | tuple) or not operand:
            raise ValidationError(field, "must be a non-empty list")
        values = [_json(item, field) for item in operand]
        test = f"({column} -> {params.add(key)}) = ANY({params.add(values)}::jsonb[])"
        return f"coalesce({test}, false)" if op == "$in" else f"NOT coalesce({test}, false)"
    if op == "$exists":
        if not isinstance(operand, bool):
            raise ValidationError(field, "must be true or false")
        test = f"{column} ? {params.add(key)}"
        return test if operand else f"NOT ({test})"
    if not _is_number(operand):
        raise ValidationError(field, "must be a finite number")
    key_param = params.add(key)
    # CASE, not AND: PostgreSQL does not promise to short-circuit AND, and
    # casting a non-number to numeric would fail the whole query.
    return (
        f"(CASE WHEN jsonb_typeof({column} -> {key_param}) = 'number' "
        f"THEN ({column} ->> {key_param})::numeric {_COMPARISONS[op]} "
        f"{params.add(str(operand))}::numeric ELSE false END)"
    )


def compile_where(where: Mapping[str, Any] | None, params: Params, column: str = "metadata") -> str:
    """SQL for a metadata filter (``TRUE`` when there is none)."""
    if where is None:
        return "TRUE"
    if not isinstance(where, Mapping):
        raise ValidationError("where", "must be a mapping of metadata keys to conditions")
    conditions = []
    for key, condition in where.items():
        if not isinstance(key, str) or not key:
            raise ValidationError("where", "keys must be non-empty strings")
        _json(key, "where")  # rejects NUL and lone surrogates in keys
        if key.startswith("$"):
            raise ValidationError(f"where.{key}", "unknown top-level operator")
        is_operator_map = isinstance(condition, Mapping) and any(
            isinstance(op, str) and op.startswith("$") for op in condition
        )
        if not is_operator_map:
            conditions.append(_equals(column, key, condition, params, f"where.{key}"))
            continue
        for op, operand in condition.items():
            if op not in _OPERATORS:
                raise ValidationError(f"where.{key}", f"unknown operator {json.dumps(op)}")
            conditions.append(_operator(column, key, op, operand, params))
    return " AND ".join(conditions) if conditions else "TRUE"
