"""Bad input is refused with a ValidationError naming the field; nothing is written."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

import pytest

from memsvc import MemoryService, Scope, ValidationError
from memsvc.core.time_limits import MAX_DURATION
from memsvc.memories.repository import MAX_QUERY_CHARS


@pytest.mark.parametrize(
    ("field", "call"),
    [
        ("content", {"content": "nul \x00 byte"}),
        ("content", {"content": "lone \ud800 surrogate"}),
        ("content", {"content": 42}),
        ("metadata", {"metadata": {"k": "nul \x00"}}),
        ("metadata key", {"metadata": {"bad\x00key": 1}}),
        ("metadata", {"metadata": {"k": "\udfff"}}),
        ("metadata", {"metadata": {"k": math.nan}}),
        ("metadata", {"metadata": {"k": object()}}),
        ("metadata", {"metadata": ["not", "a", "mapping"]}),
        ("embedding", {"embedding": [0.1] * 3}),
        ("embedding", {"embedding": [math.nan] * 384}),
        ("embedding", {"embedding": [math.inf] * 384}),
        ("embedding", {"embedding": [1e39] * 384}),
        ("embedding", {"embedding": []}),
        ("embedding", {"embedding": "not a vector"}),
        ("importance", {"importance": 1.5}),
        ("importance", {"importance": math.nan}),
        ("ttl", {"ttl": -1}),
        ("ttl", {"ttl": timedelta(days=365 * 8000)}),
        ("ttl", {"ttl": 1e12}),
        ("id", {"id": "not-a-uuid"}),
    ],
)
async def test_bad_add_names_the_field_and_writes_nothing(
    service: MemoryService, scope: Scope, field: str, call: dict
) -> None:
    arguments = {"content": "valid content", **call}
    content = arguments.pop("content")
    with pytest.raises(ValidationError) as raised:
        await service.memories.add(scope, content, **arguments)
    assert raised.value.field == field
    assert await service.memories.count(scope, include="descendants") == 0


async def test_oversize_content_and_metadata_are_refused(
    service: MemoryService, scope: Scope
) -> None:
    settings = service.settings
    with pytest.raises(ValidationError) as raised:
        await service.memories.add(scope, "x" * (settings.max_content_bytes + 1))
    assert raised.value.field == "content"
    with pytest.raises(ValidationError) as raised:
        await service.memories.add(scope, "ok", metadata={"k": "x" * settings.max_metadata_bytes})
    assert raised.value.field == "metadata"
    assert await service.memories.count(scope) == 0


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("scope.tenant", {"tenant": ""}),
        ("scope.tenant", {"tenant": "a\x00b"}),
        ("scope.project", {"project": "line\nbreak"}),
        ("scope.agent", {"agent": "x" * 256}),
        ("scope.session", {"session": "\x1b[31m"}),
        ("scope.tenant", {"tenant": 7}),
    ],
)
def test_invalid_scope_ids_are_refused(field: str, kwargs: dict) -> None:
    with pytest.raises(ValidationError) as raised:
        Scope(**kwargs)
    assert raised.value.field == field


async def test_path_like_ids_are_plain_data(service: MemoryService) -> None:
    scope = Scope("../../etc/passwd", "'; DROP TABLE memories; --", None, "{s}:x")
    memory = await service.memories.add(scope, "stored safely")
    assert (await service.memories.get(memory.id)).scope == scope
    assert await service.memories.count(Scope("..")) == 0


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("k", {"k": 0}),
        ("k", {"k": 1001}),
        ("k", {"k": "10"}),
        ("include", {"include": "everything"}),
        ("rank", {"rank": "random"}),
        ("where", {"where": ["kind"]}),
        ("where.$or", {"where": {"$or": []}}),
        ("where.n", {"where": {"n": {"$regex": "x"}}}),
        ("where.n.$gt", {"where": {"n": {"$gt": "ten"}}}),
        ("where.n.$in", {"where": {"n": {"$in": []}}}),
        ("where.n.$exists", {"where": {"n": {"$exists": "yes"}}}),
        ("min_importance", {"min_importance": 2}),
        ("created_after", {"created_after": "yesterday"}),
        ("query", {"query": [0.0] * 5}),
    ],
)
async def test_bad_search_arguments_are_refused(
    service: MemoryService, scope: Scope, field: str, kwargs: dict
) -> None:
    query = kwargs.pop("query", "anything")
    with pytest.raises(ValidationError) as raised:
        await service.memories.search(scope, query, **kwargs)
    assert raised.value.field == field


async def test_filter_values_never_become_sql(service: MemoryService, scope: Scope) -> None:
    await service.memories.add(scope, "canary", metadata={"k": "v"})
    hostile = ["'; DROP TABLE memsvc.memories; --", "$1", "->>", "\\", '"', "k') OR true --"]
    for text in hostile:
        if text.startswith("$"):
            with pytest.raises(ValidationError):  # reserved for operators
                await service.memories.search(scope, "canary", where={text: text})
        else:
            assert await service.memories.search(scope, "canary", where={text: text}) == []
        assert await service.memories.search(scope, "canary", where={"k": {"$in": [text]}}) == []
    assert await service.memories.count(scope) == 1


def test_float32_query_arrays_get_the_same_answers_as_any_other_embedding() -> None:
    # A float32 array of the right length takes a one-pass check; whatever it
    # does not clear must still get the full check's answer.
    import numpy as np

    from memsvc.core.validation import validate_embedding

    good = np.full(8, 0.5, dtype=np.float32)
    checked = validate_embedding(good, 8, distance="cosine")
    assert checked.dtype == np.float32 and checked.tolist() == good.tolist()
    assert checked is not good  # a copy: the caller may reuse its array
    huge = np.full(8, 1e30, dtype=np.float32)  # its sum of squares overflows
    assert validate_embedding(huge, 8, distance="cosine").tolist() == huge.tolist()
    zero = np.zeros(8, dtype=np.float32)
    assert validate_embedding(zero, 8, distance="l2").tolist() == [0.0] * 8
    for bad, message in (
        (np.array([math.nan] * 8, dtype=np.float32), "NaN"),
        (np.array([math.inf] + [0.5] * 7, dtype=np.float32), "NaN or infinity"),
        (zero, "zero vector"),
        (np.full(7, 0.5, dtype=np.float32), "7 dimensions"),
    ):
        with pytest.raises(ValidationError, match=message) as caught:
            validate_embedding(bad, 8, field="query", distance="cosine")
        assert caught.value.field == "query"



# ------------------------------------------------------------ times and durations
#
# A time PostgreSQL stores but Python cannot read (past 9999-12-31, before
# year 1, infinity) made every read meeting its row fail. Every duration and
# time memsvc accepts is bounded (memsvc.core.time_limits); the database's CHECK
# constraints refuse the rest.

HUGE_TTLS = [timedelta(days=365 * 8000), 1e12, MAX_DURATION + timedelta(seconds=1)]


@pytest.mark.parametrize("ttl", HUGE_TTLS)
async def test_a_ttl_past_the_limit_is_refused_and_the_scope_stays_readable(
    service: MemoryService, scope: Scope, ttl: object
) -> None:
    kept = await service.memories.add(scope, "kept")
    writes = [
        ("ttl", lambda: service.memories.add(scope, "keep forever", ttl=ttl)),
        (
            "items[1].ttl",
            lambda: service.memories.add_many(
                scope, ["fine", {"content": "keep forever", "ttl": ttl}]
            ),
        ),
        ("ttl", lambda: service.memories.put(scope, "k", "keep forever", ttl=ttl)),
    ]
    for field, write in writes:
        with pytest.raises(ValidationError) as raised:
            await write()
        assert raised.value.field == field
        assert "365,000 days" in raised.value.reason and "None" in raised.value.reason
    assert [m.id for m in await service.memories.list(scope)] == [kept.id]
    assert [h.memory.id for h in await service.memories.search(scope, "kept")] == [kept.id]
    assert await service.memories.count(scope, include="descendants") == 1


async def test_the_longest_ttl_is_stored_and_read_back(
    service: MemoryService, scope: Scope
) -> None:
    memory = await service.memories.add(scope, "nearly forever", ttl=MAX_DURATION)
    assert memory.expires_at is not None
    assert memory.expires_at - datetime.now(UTC) > MAX_DURATION - timedelta(minutes=1)
    assert await service.memories.get(memory.id) == memory
    assert [m.id for m in await service.memories.list(scope)] == [memory.id]


OUT_OF_RANGE = [
    datetime(9999, 12, 31, 12, tzinfo=UTC),  # Python reads it, not in every time zone
    datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))),  # year 0 in UTC
    datetime(1, 1, 1, 12, tzinfo=UTC),
    datetime(2026, 1, 1),  # naive
]


@pytest.mark.parametrize("moment", OUT_OF_RANGE, ids=str)
async def test_times_outside_the_range_are_refused_naming_the_argument(
    service: MemoryService, scope: Scope, moment: datetime
) -> None:
    memory = await service.memories.add(scope, "a moment")
    calls = {
        "as_of": lambda: service.memories.get(memory.id, as_of=moment),
        "created_after": lambda: service.memories.search(scope, "moment", created_after=moment),
        "created_before": lambda: service.memories.search(
            scope, "moment", created_before=moment
        ),
    }
    for field, call in calls.items():
        with pytest.raises(ValidationError) as raised:
            await call()
        assert raised.value.field == field


@pytest.mark.parametrize("mode", ["text", "hybrid"])
async def test_a_text_query_past_the_limit_is_refused_up_front(
    service: MemoryService, scope: Scope, mode: str
) -> None:
    await service.memories.add(scope, "word 7 is here")
    fits = " ".join(f"w{i}" for i in range(3_000))[:MAX_QUERY_CHARS]
    await service.memories.search(scope, fits, mode=mode)  # at the limit: searched
    huge = " ".join(f"word{i}" for i in range(100_000))  # PostgreSQL's stack ran out
    with pytest.raises(ValidationError) as raised:
        await service.memories.search(scope, huge, mode=mode)
    assert raised.value.field == "query" and str(MAX_QUERY_CHARS) in raised.value.reason
    # Searched by its embedding alone, a long text is fine.
    hits = await service.memories.search(scope, huge, mode="vector")
    assert [h.memory.content for h in hits] == ["word 7 is here"]


async def test_integers_too_large_for_a_float_are_refused_by_name(
    service: MemoryService, scope: Scope
) -> None:
    # Python ints have no limit; converting one past a float's range to check
    # it raised OverflowError instead of naming the argument.
    huge = 10**400
    for field, arguments in (("ttl", {"ttl": huge}), ("importance", {"importance": huge})):
        with pytest.raises(ValidationError) as refused:
            await service.memories.add(scope, "too much", **arguments)
        assert refused.value.field == field
    with pytest.raises(ValidationError) as refused:
        await service.working(scope.with_session("s")).set("k", 1, ttl_seconds=huge)
    assert refused.value.field == "ttl_seconds"
    assert await service.memories.count(scope) == 0
