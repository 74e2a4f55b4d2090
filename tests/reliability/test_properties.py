"""Bad input, generated: every call is a faithful round trip or a ValidationError
naming the field; never a raw driver error, never a partial write; filters are
data (a canary table survives every one) and select exactly the rows a Python
implementation of the documented filter semantics selects.

One MemoryService per test function (not per example); rows are removed
between examples.
"""

from __future__ import annotations

import json
import math
import random
from decimal import Decimal
from typing import Any

import asyncpg
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memsvc import MemoryService, Scope, ValidationError

DIM = 384
EXAMPLES = 120
PROPERTY_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
MAX_CONTENT_BYTES = 4096
MAX_METADATA_BYTES = 4096
SCOPE = Scope(tenant="props", session="s-1")

# Text that includes what PostgreSQL cannot store (NUL, lone surrogates) and
# what SQL text would choke on (quotes, comments, placeholders, operators).
NASTY = ["\x00", "\ud800", "'", '"', "--", ";", "$1", "->>", "\\", "%", "😀", "\u202e", " "]
any_char = st.characters(exclude_categories=())
text = st.one_of(
    st.text(any_char, max_size=30),
    st.lists(st.sampled_from(NASTY) | st.text(max_size=4), max_size=6).map("".join),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.floats(allow_nan=True, allow_infinity=True),
    text,
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(text, children, max_size=4),
    max_leaves=12,
)


def _deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(levels):
        value = {"d": value}
    return value


@pytest.fixture
async def prop_service(open_service, admin: asyncpg.Connection) -> Any:
    await admin.execute(
        "CREATE TABLE public.canary (id int PRIMARY KEY); INSERT INTO public.canary VALUES (1)"
    )
    async with open_service(
        embedder=False,
        max_content_bytes=MAX_CONTENT_BYTES,
        max_metadata_bytes=MAX_METADATA_BYTES,
    ) as service:
        yield service


async def _count_all(admin: asyncpg.Connection) -> tuple[int, int]:
    row = await admin.fetchrow(
        "SELECT (SELECT count(*) FROM memsvc.memories) AS m,"
        " (SELECT count(*) FROM memsvc.memory_events) AS e"
    )
    return row["m"], row["e"]


async def _clean(admin: asyncpg.Connection) -> None:
    await admin.execute("TRUNCATE memsvc.memory_events, memsvc.memories CASCADE")


def _field_root(error: ValidationError) -> str:
    return error.field.split(".")[0].split("[")[0].split(" ")[0]


# --------------------------------------------------------------- content, metadata


@pytest.mark.timeout(120)
@PROPERTY_SETTINGS
@given(content=text, metadata=st.dictionaries(text, json_values, max_size=5))
@example(content="x" * (MAX_CONTENT_BYTES + 1), metadata={})
@example(content="ok", metadata={"big": "y" * MAX_METADATA_BYTES})
@example(content="ok", metadata=_deep(100))
@example(content="ok", metadata={"\x00": 1})
@example(content="ok", metadata={"k": float("nan")})
async def test_content_and_metadata_round_trip_or_are_rejected_by_name(
    prop_service: MemoryService, admin: asyncpg.Connection, content: str, metadata: dict[str, Any]
) -> None:
    await _clean(admin)
    try:
        memory = await prop_service.memories.add(SCOPE, content, metadata=metadata)
    except ValidationError as error:
        assert _field_root(error) in {"content", "metadata"}, error.field
        assert await _count_all(admin) == (0, 0), "a rejected add wrote something"
        return
    stored = await prop_service.memories.get(memory.id)
    assert stored.content == content
    assert _json_equal(stored.metadata, metadata)
    assert await _count_all(admin) == (1, 1)


@pytest.mark.timeout(60)
async def test_metadata_nested_past_the_limit_is_rejected_by_name(
    prop_service: MemoryService, admin: asyncpg.Connection
) -> None:
    with pytest.raises(ValidationError) as raised:
        await prop_service.memories.add(SCOPE, "deep", metadata=_deep(600))
    assert raised.value.field == "metadata"
    assert await _count_all(admin) == (0, 0)


# --------------------------------------------------------------- embeddings

floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e39, -1e39, 3.4e38, 0.0, -0.0, 1e-45]),
)
embeddings = st.one_of(
    st.lists(floats, min_size=0, max_size=8),
    st.lists(st.floats(-1e6, 1e6), min_size=DIM, max_size=DIM),
    st.integers(min_value=0, max_value=DIM).flatmap(
        lambda i: st.sampled_from([float("nan"), float("inf"), 1e39]).map(
            lambda bad: [0.5] * i + [bad] + [0.5] * (DIM - i - 1)
        )
    ),
    st.lists(st.floats(-1, 1), min_size=DIM + 1, max_size=DIM + 1),
)


@pytest.mark.timeout(120)
@PROPERTY_SETTINGS
@given(embedding=embeddings)
@example(embedding=[])
@example(embedding=[1e39] * DIM)
async def test_embeddings_round_trip_as_float32_or_are_rejected_by_name(
    prop_service: MemoryService, admin: asyncpg.Connection, embedding: list[float]
) -> None:
    await _clean(admin)
    try:
        memory = await prop_service.memories.add(SCOPE, "vector", embedding=embedding)
    except ValidationError as error:
        assert error.field == "embedding"
        assert await _count_all(admin) == (0, 0)
        return
    stored = await prop_service.memories.get(memory.id)
    assert stored.embedding is not None
    np.testing.assert_array_equal(
        np.asarray(stored.embedding, dtype=np.float32), np.asarray(embedding, dtype=np.float32)
    )


# --------------------------------------------------------------- scope ids


@pytest.mark.timeout(120)
@PROPERTY_SETTINGS
@given(tenant=text, session=text)
@example(tenant="../../etc/passwd", session="'; DROP TABLE canary; --")
async def test_scope_ids_are_data_or_are_rejected_by_name(
    prop_service: MemoryService, admin: asyncpg.Connection, tenant: str, session: str
) -> None:
    await _clean(admin)
    try:
        scope = Scope(tenant=tenant, session=session)
    except ValidationError as error:
        assert error.field in {"scope.tenant", "scope.session"}
        return
    memory = await prop_service.memories.add(scope, "scoped")
    assert [m.id for m in await prop_service.memories.list(scope)] == [memory.id]
    assert (await prop_service.memories.get(memory.id)).scope == scope
    assert await admin.fetchval("SELECT count(*) FROM public.canary") == 1


# --------------------------------------------------------------- where filters

KEYS = ["kind", "score", "it's", 'q"uote', "--", "a;b", "$1x", "->>", "nested", "tags", "flag"]
STORED_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.sampled_from([0.5, 1.0, 2.5, -0.0]),
    st.sampled_from(["a", "b", "'", "--", "$1", "x'; DROP TABLE canary; --"]),
    st.lists(st.integers(0, 2), max_size=2),
    st.fixed_dictionaries({"a": st.integers(0, 1)}),
)
filter_keys = st.one_of(st.sampled_from(KEYS), text)
operand = st.one_of(STORED_VALUES, scalars, json_values)
condition = st.one_of(
    operand,
    st.dictionaries(
        st.sampled_from(
            ["$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte", "$exists", "$bogus"]
        ),
        st.one_of(operand, st.lists(operand, max_size=3)),
        min_size=1,
        max_size=2,
    ),
)
wheres = st.dictionaries(filter_keys, condition, max_size=3)
ROWS = 24


def _json_equal(a: Any, b: Any) -> bool:
    """JSON equality as jsonb defines it: numbers by value, booleans apart from numbers."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return Decimal(json.dumps(a)) == Decimal(json.dumps(b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _equals(metadata: dict[str, Any], key: str, value: Any) -> bool:
    return key in metadata and _json_equal(metadata[key], value)


def _matches(metadata: dict[str, Any], where: dict[str, Any]) -> bool:
    """The filter semantics of memsvc.memories.filters' docstring, in Python."""
    for key, cond in where.items():
        is_ops = isinstance(cond, dict) and any(
            isinstance(op, str) and op.startswith("$") for op in cond
        )
        if not is_ops:
            if not _equals(metadata, key, cond):
                return False
            continue
        for op, arg in cond.items():
            if op == "$eq" and not _equals(metadata, key, arg):
                return False
            if op == "$ne" and _equals(metadata, key, arg):  # missing counts as not equal
                return False
            if op == "$in" and not any(_equals(metadata, key, v) for v in arg):
                return False
            if op == "$nin" and any(_equals(metadata, key, v) for v in arg):
                return False
            if op == "$exists" and (key in metadata) != arg:
                return False
            if op in ("$gt", "$gte", "$lt", "$lte"):
                value = metadata.get(key)
                if not _is_number(value):
                    return False
                left, right = Decimal(json.dumps(value)), Decimal(str(arg))
                ok = {
                    "$gt": left > right,
                    "$gte": left >= right,
                    "$lt": left < right,
                    "$lte": left <= right,
                }[op]
                if not ok:
                    return False
    return True


def _valid_filter(where: dict[str, Any]) -> bool:
    """Whether the documented rules accept this filter (else ValidationError)."""
    for key, cond in where.items():
        if not key or key.startswith("$") or "\x00" in key or _has_surrogate(key):
            return False
        is_ops = isinstance(cond, dict) and any(
            isinstance(op, str) and op.startswith("$") for op in cond
        )
        values = [cond] if not is_ops else []
        if is_ops:
            for op, arg in cond.items():
                if op not in {"$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte", "$exists"}:
                    return False
                if op in ("$in", "$nin"):
                    if not isinstance(arg, list) or not arg:
                        return False
                    values.extend(arg)
                elif op == "$exists":
                    if not isinstance(arg, bool):
                        return False
                elif op in ("$eq", "$ne"):
                    values.append(arg)
                elif not (_is_number(arg) and math.isfinite(arg)):
                    return False
        if not all(_storable(v) for v in values):
            return False
    return True


def _has_surrogate(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _storable(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str):
        return "\x00" not in value and not _has_surrogate(value)
    if isinstance(value, list):
        return all(_storable(v) for v in value)
    if isinstance(value, dict):
        return all(_storable(k) and _storable(v) for k, v in value.items())
    return True


STORED_POOL: list[Any] = [
    None,
    True,
    False,
    -5,
    0,
    1,
    2,
    3,
    4,
    5,
    0.5,
    1.0,
    2.5,
    -0.0,
    "a",
    "b",
    "'",
    "--",
    "$1",
    "x'; DROP TABLE canary; --",
    [],
    [1],
    [0, 2],
    {"a": 0},
    {"a": 1},
]


@pytest.fixture
async def filter_rows(prop_service: MemoryService) -> dict[Any, dict[str, Any]]:
    """ROWS memories whose metadata mixes every kind of value under awkward keys."""
    rng = random.Random(11)
    vectors = np.random.default_rng(11)
    stored: dict[Any, dict[str, Any]] = {}
    for i in range(ROWS):
        metadata = (
            {key: rng.choice(STORED_POOL) for key in rng.sample(KEYS, rng.randint(0, 5))}
            if i % 3
            else {"kind": "a", "score": i % 5}
        )
        vector = vectors.standard_normal(DIM).astype(np.float32)
        memory = await prop_service.memories.add(
            SCOPE, f"row {i}", metadata=metadata, embedding=vector
        )
        stored[memory.id] = memory.metadata
    return stored


@pytest.mark.timeout(120)
@PROPERTY_SETTINGS
@given(where=wheres)
@example(where={"kind": {"$ne": [1]}})
@example(where={"x'; DROP TABLE canary; --": 1})
@example(where={"score": {"$gte": 2, "$lt": 4}})
@example(where={"nested": {"a": 1}})
async def test_filters_select_what_a_python_filter_selects_and_stay_data(
    prop_service: MemoryService,
    admin: asyncpg.Connection,
    filter_rows: dict[Any, dict[str, Any]],
    where: dict[str, Any],
) -> None:
    query = np.ones(DIM, dtype=np.float32)
    try:
        hits = await prop_service.memories.search(SCOPE, query, k=1000, where=where)
    except ValidationError as error:
        assert error.field.startswith("where"), error.field
        assert not _valid_filter(where), f"a valid filter was refused: {error}"
    else:
        assert _valid_filter(where), "an invalid filter was accepted"
        expected = {memory_id for memory_id, meta in filter_rows.items() if _matches(meta, where)}
        assert {hit.memory.id for hit in hits} == expected
    assert await admin.fetchval("SELECT count(*) FROM public.canary") == 1
    assert await prop_service.memories.count(SCOPE) == ROWS


@pytest.mark.timeout(60)
async def test_ne_counts_a_missing_key_as_not_equal_for_list_and_object_values(
    prop_service: MemoryService,
) -> None:
    """The filters docstring: "$ne ... (missing counts as not equal)" -- for every value."""
    query = np.ones(DIM, dtype=np.float32)
    without = await prop_service.memories.add(SCOPE, "no kind", embedding=query)
    await prop_service.memories.add(SCOPE, "kind [1]", metadata={"kind": [1]}, embedding=query)
    for value in ([1], {"a": 1}, "scalar"):
        hits = await prop_service.memories.search(
            SCOPE, query, k=10, where={"kind": {"$ne": value}}
        )
        assert without.id in {hit.memory.id for hit in hits}, f"$ne {value!r} dropped it"
