"""Bad input is refused with a ValidationError naming the field; nothing is written."""

from __future__ import annotations

import math

import pytest

from memsvc import MemoryService, Scope, ValidationError


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

    from memsvc.validation import validate_embedding

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

