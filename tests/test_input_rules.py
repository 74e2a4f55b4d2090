"""Input rules that hold at every public entry point, not just in one example.

- A parameter taking several items refuses a string, bytes or a mapping
  (which Python would happily iterate) and anything that is not a collection.
- An embedding is a sequence or 1-d array of real numbers: finite, of the
  configured dimension, not bools or strings, and not zero under cosine.
- JSON values read back as written, numbers with their type; importance
  (a ``real`` column) reads back as written.
- Memory content is never empty or whitespace only.
- Assembly name clashes say which name in which scope; reprs shorten vectors.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memsvc import ConflictError, HashingEmbedder, MemoryService, Scope, Settings, ValidationError
from memsvc.core import jsontext
from memsvc.core.models import Memory
from memsvc.core.time_limits import EARLIEST, LATEST
from memsvc.core.validation import validate_embedding
from memsvc.sync import SyncMemoryService
from memsvc.transfer import records
from memsvc.transfer.records import memory_from_json

SCOPE = Scope("acme", "bridge", "planner", "s-42")
DIM = 384

Call = Callable[[Any, dict[str, Any], Any], Any]


@pytest.fixture
async def ctx(service: MemoryService) -> dict[str, Any]:
    """One memory, in one assembly: what the calls below act on."""
    memory = await service.memories.add(SCOPE, "the user prefers metric units")
    assembly = await service.assemblies.create(SCOPE, "units", memory_ids=[memory.id])
    return {"memory": memory.id, "assembly": assembly.id}


@pytest.fixture
def sync_service(settings: Settings) -> Iterator[SyncMemoryService]:
    service = SyncMemoryService.open(settings, embedder=HashingEmbedder())
    yield service
    service.close()


async def _unchanged(service: MemoryService, ctx: dict[str, Any]) -> None:
    """Nothing was written by a refused call."""
    assert await service.memories.count(SCOPE, include="descendants") == 1
    assert [a.id for a in await service.assemblies.list(SCOPE)] == [ctx["assembly"]]
    assert (await service.assemblies.get(ctx["assembly"])).member_count == 1


# ---------------------------------------------------------------- sequences

SEQUENCE_CALLS: dict[str, tuple[str, Call]] = {
    "memories.add_many": ("items", lambda s, c, v: s.memories.add_many(SCOPE, v)),
    "memories.get_many": ("ids", lambda s, c, v: s.memories.get_many(v)),
    "assemblies.create": (
        "memory_ids",
        lambda s, c, v: s.assemblies.create(SCOPE, "group", memory_ids=v),
    ),
    "assemblies.add_members": (
        "memory_ids",
        lambda s, c, v: s.assemblies.add_members(c["assembly"], v),
    ),
    "assemblies.remove_members": (
        "memory_ids",
        lambda s, c, v: s.assemblies.remove_members(c["assembly"], v),
    ),
}

NOT_SEQUENCES: dict[str, object] = {
    "a string": "abc",
    "bytes": b"abc",
    "a bytearray": bytearray(b"abc"),
    "a mapping": {"content": "x"},
    "an int": 42,
    "None": None,
    "one id instead of a list": uuid.uuid4(),
}


@pytest.mark.parametrize("entry", SEQUENCE_CALLS)
async def test_sequence_parameters_refuse_strings_bytes_mappings_and_scalars(
    service: MemoryService, ctx: dict[str, Any], entry: str
) -> None:
    field, call = SEQUENCE_CALLS[entry]
    failures = []
    for name, value in NOT_SEQUENCES.items():
        try:
            await call(service, ctx, value)
        except ValidationError as exc:
            if exc.field != field:
                failures.append(f"{name}: field {exc.field!r}, expected {field!r}")
        else:
            failures.append(f"{name}: accepted")
    assert failures == []
    await _unchanged(service, ctx)


@pytest.mark.parametrize("entry", ["memories.add_many", "memories.get_many", "assemblies.create"])
def test_sequence_parameters_refuse_non_sequences_in_the_sync_client(
    sync_service: SyncMemoryService, entry: str
) -> None:
    field, call = SEQUENCE_CALLS[entry]
    for value in NOT_SEQUENCES.values():
        with pytest.raises(ValidationError) as raised:
            call(sync_service, {}, value)
        assert raised.value.field == field
    assert sync_service.memories.count(SCOPE, include="descendants") == 0
    assert sync_service.assemblies.list(SCOPE) == []


async def test_any_collection_of_items_is_accepted(
    service: MemoryService, ctx: dict[str, Any]
) -> None:
    added = await service.memories.add_many(SCOPE, (text for text in ("one", "two")))
    assert [m.content for m in added] == ["one", "two"]
    ids = {m.id for m in added}
    assert {m.id for m in await service.memories.get_many(tuple(ids))} == ids
    grown = await service.assemblies.add_members(ctx["assembly"], ids)
    assert grown.member_count == 3
    shrunk = await service.assemblies.remove_members(ctx["assembly"], iter(ids))
    assert shrunk.member_count == 1


# ---------------------------------------------------------------- embeddings

EMBEDDING_CALLS: dict[str, tuple[str, Call]] = {
    "memories.add": ("embedding", lambda s, c, v: s.memories.add(SCOPE, "text", embedding=v)),
    "memories.add_many": (
        "items[0].embedding",
        lambda s, c, v: s.memories.add_many(SCOPE, [{"content": "text", "embedding": v}]),
    ),
    "memories.put": ("embedding", lambda s, c, v: s.memories.put(SCOPE, "k", "text", embedding=v)),
    "memories.update": ("embedding", lambda s, c, v: s.memories.update(c["memory"], embedding=v)),
    "memories.search": ("query", lambda s, c, v: s.memories.search(SCOPE, v)),
    "memories.explain_search": ("query", lambda s, c, v: s.memories.explain_search(SCOPE, v)),
    "assemblies.search": ("query", lambda s, c, v: s.assemblies.search(SCOPE, v)),
}

BAD_EMBEDDINGS: dict[str, object] = {
    "a zero vector (cosine)": [0.0] * DIM,
    "a zero numpy array (cosine)": np.zeros(DIM, dtype=np.float32),
    "a vector too small to have a length (cosine)": [1e-30] * DIM,
    "numeric strings": ["0.1"] * DIM,
    "a numpy array of strings": np.array(["0.1"] * DIM),
    "bools": [True] * DIM,
    "one bool among floats": [0.1] * (DIM - 1) + [True],
    "a numpy array of bools": np.ones(DIM, dtype=bool),
    "None among floats": [0.1] * (DIM - 1) + [None],
    "complex numbers": [1j] * DIM,
    "a string": "0.1," * DIM,
    "bytes": b"\x00" * DIM,
    "a mapping": {i: 0.1 for i in range(DIM)},
    "a set": {0.1, 0.2},
    "two dimensions": np.ones((2, DIM // 2)),
    "NaN": [math.nan] * DIM,
    "infinity": [math.inf] + [0.1] * (DIM - 1),
    "the wrong dimension": [0.1] * (DIM - 1),
}


def _embedding_failures(field: str, outcomes: dict[str, BaseException | None]) -> list[str]:
    failures = []
    for name, error in outcomes.items():
        if error is None:
            failures.append(f"{name}: accepted")
        elif not isinstance(error, ValidationError):
            failures.append(f"{name}: {type(error).__name__}: {error}")
        elif error.field != field:
            failures.append(f"{name}: field {error.field!r}, expected {field!r}")
    return failures


@pytest.mark.parametrize("entry", EMBEDDING_CALLS)
async def test_embeddings_that_cannot_be_compared_are_refused(
    service: MemoryService, ctx: dict[str, Any], entry: str
) -> None:
    field, call = EMBEDDING_CALLS[entry]
    outcomes: dict[str, BaseException | None] = {}
    for name, value in BAD_EMBEDDINGS.items():
        if field == "query" and isinstance(value, str):
            continue  # a text query, embedded by the service's embedder
        try:
            await call(service, ctx, value)
            outcomes[name] = None
        except Exception as exc:
            outcomes[name] = exc
    assert _embedding_failures(field, outcomes) == []
    await _unchanged(service, ctx)
    stored = await service.memories.get(ctx["memory"])
    assert stored.version == 1  # update never went through


@pytest.mark.parametrize("entry", ["memories.add", "memories.add_many", "memories.search"])
def test_embeddings_that_cannot_be_compared_are_refused_by_the_sync_client(
    sync_service: SyncMemoryService, entry: str
) -> None:
    field, call = EMBEDDING_CALLS[entry]
    outcomes: dict[str, BaseException | None] = {}
    for name, value in BAD_EMBEDDINGS.items():
        if field == "query" and isinstance(value, str):
            continue  # a text query, embedded by the service's embedder
        try:
            call(sync_service, {}, value)
            outcomes[name] = None
        except Exception as exc:
            outcomes[name] = exc
    assert _embedding_failures(field, outcomes) == []
    assert sync_service.memories.count(SCOPE, include="descendants") == 0


def test_embeddings_that_cannot_be_compared_are_refused_by_the_export_reader(
    settings: Settings,
) -> None:
    outcomes: dict[str, BaseException | None] = {}
    for name, value in BAD_EMBEDDINGS.items():
        if isinstance(value, np.ndarray | bytes | set):
            continue  # not something a JSON line can hold
        try:
            memory_from_json({"type": "memory", "content": "x", "embedding": value}, settings)
            outcomes[name] = None
        except Exception as exc:
            outcomes[name] = exc
    assert _embedding_failures("embedding", outcomes) == []


@pytest.mark.parametrize(
    "vector",
    [
        [1] * DIM,
        tuple([0.5] * DIM),
        [np.float32(0.25)] * DIM,
        np.arange(1, DIM + 1, dtype=np.int64),
        np.full(DIM, 0.5, dtype=np.float16),
        np.full(DIM, 0.5, dtype=np.float64),
    ],
    ids=["ints", "tuple", "numpy scalars", "int array", "float16 array", "float64 array"],
)
async def test_real_numbers_in_any_sequence_or_1d_array_are_accepted(
    service: MemoryService, vector: Any
) -> None:
    memory = await service.memories.add(SCOPE, "real numbers", embedding=vector)
    expected = np.asarray(vector, dtype=np.float32)
    assert np.array_equal(np.asarray((await service.memories.get(memory.id)).embedding), expected)
    hits = await service.memories.search(SCOPE, vector, k=1)
    assert hits[0].memory.id == memory.id


def test_a_zero_vector_is_refused_only_under_cosine() -> None:
    zero = [0.0] * 4
    for distance in ("l2", "ip"):
        assert validate_embedding(zero, 4, distance=distance).tolist() == zero
    with pytest.raises(ValidationError, match="zero vector"):
        validate_embedding(zero, 4, distance="cosine")
    # float16 storage turns 1e-8 into 0: as a halfvec it has no length either.
    assert validate_embedding([1e-8] * 4, 4, "vector", distance="cosine") is not None
    with pytest.raises(ValidationError, match="zero vector"):
        validate_embedding([1e-8] * 4, 4, "halfvec", distance="cosine")


def _export_style_line(content: str, vector: list[float]) -> str:
    """A memory line as ``memsvc export`` writes it: the embedding last, as plain numbers."""
    return _export_line_with_numbers(content, [f"{x:.9g}" for x in vector])


async def test_import_refuses_zero_vectors_on_the_fast_text_path(
    service: MemoryService, tmp_path: Path
) -> None:
    good = (np.arange(DIM) % 7 - 3).astype(float).tolist()
    lines = [
        _export_style_line("zero", [0.0] * DIM),
        _export_style_line("negative zeros", [-0.0] * DIM),
        _export_style_line("tiny", [1e-30] * DIM),
        _export_style_line("fine", good),
        _export_style_line("tiny but one", [1e-30] * (DIM - 1) + [0.5]),
    ]
    path = tmp_path / "export.jsonl"
    path.write_text("".join(lines))
    report = await service.maintenance.import_file(path, allow_truncated=True)  # no trailer
    assert report.memories.inserted == 2
    assert [(p.source, p.reason) for p in report.rejected] == [
        (f"line {n}", "embedding: is a zero vector: it has no direction to compare "
         "under cosine distance")
        for n in (1, 2, 3)
    ]  # fmt: skip
    stored = await service.memories.list(Scope("imports"))
    assert sorted(m.content for m in stored) == ["fine", "tiny but one"]


def _export_line_with_numbers(content: str, numbers: list[str]) -> str:
    """An export-style memory line whose vector is written exactly as ``numbers``."""
    head = json.dumps({"type": "memory", "tenant": "imports", "content": content})
    return f'{head[:-1]},"embedding":[{",".join(numbers)}]}}\n'


async def test_import_stores_vector_text_as_json_numbers_and_names_bad_ones(
    service: MemoryService, tmp_path: Path
) -> None:
    # Just above the midpoint of 1 and the next float32: its nearest double
    # is the midpoint itself, which rounds to 1.0, as add() of the json
    # numbers stores it (and PostgreSQL's vector input reads it).
    near_midpoint = "1.0000000596046447755"
    fine = [near_midpoint] + ["0.25"] * (DIM - 1)
    too_large = ["1e39"] + ["0.25"] * (DIM - 1)
    unreadable = ["1-2"] + ["0.25"] * (DIM - 1)
    path = tmp_path / "export.jsonl"
    path.write_text(
        _export_line_with_numbers("fine", fine)
        + _export_line_with_numbers("too large", too_large)
        + _export_line_with_numbers("unreadable", unreadable)
        + _export_line_with_numbers("also fine", ["0.5"] * DIM)
    )
    report = await service.maintenance.import_file(path, allow_truncated=True)  # no trailer
    with pytest.raises(ValueError) as not_json:
        json.loads("[" + ",".join(unreadable) + "]")
    assert [(p.source, p.reason) for p in report.rejected] == [
        ("line 2", "embedding: has values outside the vector range (±3.40282e+38)"),
        ("line 3", f"embedding: {not_json.value}"),
    ]
    stored = {m.content: m for m in await service.memories.list(Scope("imports"))}
    assert sorted(stored) == ["also fine", "fine"]
    expected = np.asarray(json.loads("[" + ",".join(fine) + "]"), dtype=np.float64)
    assert np.array_equal(np.asarray(stored["fine"].embedding), expected.astype(np.float32))
    assert float(np.asarray(stored["fine"].embedding)[0]) == 1.0


@pytest.mark.parametrize("vector_type", ["vector", "halfvec"])
def test_batch_vector_parsing_agrees_with_validate_embedding(vector_type: str) -> None:
    rows = [
        ["0.1", "-2.5e-3", "7"],
        ["1e39", "0", "0"],  # outside both types' range
        ["70000", "1", "1"],  # outside halfvec's only
        ["0", "-0", "0"],  # no direction under cosine
        ["1e-8", "1e-8", "1e-8"],  # no length once stored as halfvec
        ["1-2", "0", "0"],  # not numbers: the batch is read row by row
        ["3", "4", "1.0000000596046447755"],
    ]
    texts = [",".join(row).encode() for row in rows]
    parsed = records.parse_vector_texts(texts, 3, vector_type, "cosine")
    for row, vector in zip(rows, parsed, strict=True):
        try:
            expected = validate_embedding(
                json.loads("[" + ",".join(row) + "]"), 3, vector_type, distance="cosine"
            )
        except (ValidationError, ValueError):
            assert vector is None, row
        else:
            assert vector is not None and vector.dtype == np.float32, row
            assert np.array_equal(vector, expected), row
    assert records.parse_vector_texts(texts[:1], 4, vector_type) == [None]  # wrong length


async def test_legacy_import_refuses_vectors_that_cannot_be_compared(
    service: MemoryService, tmp_path: Path
) -> None:
    folder = tmp_path / "store" / "memories"
    folder.mkdir(parents=True)
    for name, vector in [
        ("zero", [0.0] * DIM),
        ("strings", ["0.1"] * DIM),
        ("bools", [True] * DIM),
        ("fine", [0.1] * DIM),
    ]:
        (folder / f"{name}.json").write_text(
            json.dumps({"id": name, "content": f"memory {name}", "embedding": vector})
        )
    report = await service.maintenance.import_legacy(tmp_path / "store", tenant="legacy")
    rejected = {p.source: p.reason for p in report.load.rejected if p.kind == "memory"}
    assert set(rejected) == {"memories/zero.json", "memories/strings.json", "memories/bools.json"}
    assert all(reason.startswith("embedding: ") for reason in rejected.values())
    assert [m.content for m in await service.memories.list(Scope("legacy"))] == ["memory fine"]


# ---------------------------------------------------------------- imported times

# Times PostgreSQL would store but Python could not read back (or only in UTC).
IMPORTED_TIMES_OUT_OF_RANGE = [
    "9999-12-31T23:30:00-05:00",  # year 10000 in UTC
    "0001-01-01T00:00:00+05:00",  # year 0 in UTC
    "9999-12-31T12:00:00Z",
    "0001-01-01T00:00:00Z",
    1e12,  # Unix seconds: year 33658
]


@pytest.mark.parametrize("value", IMPORTED_TIMES_OUT_OF_RANGE, ids=repr)
@pytest.mark.parametrize("field", ["created_at", "updated_at", "expires_at", "last_accessed_at"])
def test_imported_times_out_of_range_are_refused_naming_the_field(
    field: str, value: object
) -> None:
    with pytest.raises(ValidationError) as raised:
        memory_from_json({"type": "memory", "content": "x", field: value}, Settings())
    assert raised.value.field == field


def test_imported_times_at_the_ends_of_the_range_are_kept() -> None:
    record = memory_from_json(
        {
            "type": "memory",
            "content": "x",
            "created_at": "0001-01-02T00:00:00Z",
            "expires_at": "9999-12-30T23:59:59.999999+00:00",
        },
        Settings(),
    )
    assert record.created_at == EARLIEST and record.expires_at == LATEST


async def test_an_import_rejects_a_line_out_of_range_and_loads_the_rest_readably(
    service: MemoryService, tmp_path: Path
) -> None:
    lines = [
        {"type": "memory", "tenant": "t", "content": "fine", "expires_at": "2999-01-01T00:00Z"},
        {"type": "memory", "tenant": "t", "content": "far", "expires_at": "9999-12-31T23:30-05:00"},
        {"type": "store_item", "tenant": "t", "namespace": ["n"], "key": "k", "value": {},
         "ttl_minutes": 1e12},
    ]
    path = tmp_path / "times.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    report = await service.maintenance.import_file(path, allow_truncated=True)  # no trailer
    reasons = sorted(problem.reason for problem in report.rejected)
    assert len(reasons) == 2
    assert reasons[0].startswith("expires_at: must be within") and "ttl_minutes" in reasons[1]
    assert [m.content for m in await service.memories.list(Scope("t"))] == ["fine"]


# ---------------------------------------------------------------- JSON values

JSON_VALUES: dict[str, Any] = {
    "big float": 1e20,
    "float at the exponent threshold": 1e16,
    "huge negative float": -2.5e300,
    "largest float": 1.7976931348623157e308,
    "small float": 1e-7,
    "smallest float": 5e-324,
    "whole float": 1.0,
    "big int": 10**20,
    "nested": [1e20, {"deeper": 1e17, "int": 3}],
    "text that looks like a number": "1e+20",
    "bool": True,
    "null": None,
}


def assert_same_json(got: Any, expected: Any, path: str = "$") -> None:
    """Equal, and every number of the same type (a float stays a float)."""
    assert type(got) is type(expected), f"{path}: {type(got).__name__} {got!r} != {expected!r}"
    if isinstance(expected, dict):
        assert set(got) == set(expected), path
        for key in expected:
            assert_same_json(got[key], expected[key], f"{path}.{key}")
    elif isinstance(expected, list):
        assert len(got) == len(expected), path
        for i, (a, b) in enumerate(zip(got, expected, strict=True)):
            assert_same_json(a, b, f"{path}[{i}]")
    else:
        assert got == expected, path


async def test_metadata_reads_back_as_written_everywhere(service: MemoryService) -> None:
    memories = service.memories
    added = await memories.add(SCOPE, "added", metadata=JSON_VALUES)
    assert_same_json(added.metadata, JSON_VALUES)
    (batched,) = await memories.add_many(SCOPE, [{"content": "batched", "metadata": JSON_VALUES}])
    keyed = await memories.put(SCOPE, "key", "keyed", metadata=JSON_VALUES)
    updated = await memories.add(SCOPE, "updated")
    await memories.update(updated.id, metadata=JSON_VALUES)
    patched = await memories.add(SCOPE, "patched")
    assert_same_json((await memories.patch_metadata(patched.id, JSON_VALUES)).metadata, JSON_VALUES)
    for memory in (added, batched, keyed, updated, patched):
        assert_same_json((await memories.get(memory.id)).metadata, JSON_VALUES)
    assert_same_json((await memories.get_by_key(SCOPE, "key")).metadata, JSON_VALUES)
    for memory in await memories.list(SCOPE):
        assert_same_json(memory.metadata, JSON_VALUES)
    for hit in await memories.search(SCOPE, "added", k=5):
        assert_same_json(hit.memory.metadata, JSON_VALUES)


@pytest.mark.parametrize(
    "text",
    [
        "{}",
        '{"b": 1, "topic": "ops"}',
        json.dumps(JSON_VALUES),
        ' {"a": 1}',
        '{"a": 1} ',
        '{"x": 1, "x": 2}',
        "NaN",
        "\ufeff{}",
        '{"a": }',
        '{"a": 1}x',
        "",
        '{"a": "\x01"}',
    ],
)
def test_json_decoding_is_json_loads(text: str) -> None:
    """The jsonb decoder's shortcut gives json.loads's value, or raises its error."""
    try:
        expected = json.loads(text)
    except json.JSONDecodeError as exc:
        with pytest.raises(json.JSONDecodeError) as raised:
            jsontext.loads(text)
        assert (raised.value.msg, raised.value.pos) == (exc.msg, exc.pos)
        return
    got = jsontext.loads(text)
    if isinstance(expected, float) and math.isnan(expected):
        assert isinstance(got, float) and math.isnan(got)
    else:
        assert_same_json(got, expected)


async def test_assembly_metadata_reads_back_as_written(service: MemoryService) -> None:
    created = await service.assemblies.create(SCOPE, "created", metadata=JSON_VALUES)
    assert_same_json(created.metadata, JSON_VALUES)
    assert_same_json((await service.assemblies.get(created.id)).metadata, JSON_VALUES)
    other = await service.assemblies.create(SCOPE, "updated")
    assert_same_json(
        (await service.assemblies.update(other.id, metadata=JSON_VALUES)).metadata, JSON_VALUES
    )
    assert_same_json((await service.assemblies.get_by_name(SCOPE, "updated")).metadata, JSON_VALUES)


async def test_checkpoint_data_reads_back_as_written(service: MemoryService) -> None:
    checkpoints = service.checkpoints
    created = await checkpoints.create(SCOPE, JSON_VALUES)
    assert_same_json(created.data, JSON_VALUES)
    assert_same_json((await checkpoints.get(created.id)).data, JSON_VALUES)
    assert_same_json((await checkpoints.latest(SCOPE)).data, JSON_VALUES)
    (listed,) = await checkpoints.list(SCOPE, with_data=True)
    assert_same_json(listed.data, JSON_VALUES)
    scalar = await checkpoints.create(SCOPE, 1e20)
    assert_same_json((await checkpoints.get(scalar.id)).data, 1e20)


async def test_working_memory_values_survive_a_checkpoint_round_trip(
    service: MemoryService,
) -> None:
    wm = service.working(SCOPE)
    await wm.set("values", JSON_VALUES)
    checkpoint = await wm.create_checkpoint("before")
    await wm.clear()
    await wm.restore_checkpoint(checkpoint)
    assert_same_json(await wm.get("values"), JSON_VALUES)


async def test_export_and_reimport_keep_json_values_and_importance(
    service: MemoryService, tmp_path: Path
) -> None:
    memory = await service.memories.add(SCOPE, "exported", metadata=JSON_VALUES, importance=0.8)
    await service.checkpoints.create(SCOPE, JSON_VALUES)
    path = tmp_path / "export.jsonl"
    with path.open("w") as out:
        await service.maintenance.export(out)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    (memory_line,) = [line for line in lines if line["type"] == "memory"]
    assert memory_line["importance"] == 0.8
    assert_same_json(memory_line["metadata"], JSON_VALUES)
    (checkpoint_line,) = [line for line in lines if line["type"] == "checkpoint"]
    assert_same_json(checkpoint_line["data"], JSON_VALUES)
    await service.memories.delete(memory.id)
    report = await service.maintenance.import_file(path)
    assert report.memories.inserted == 1, report.rejected
    back = await service.memories.get(memory.id)
    assert_same_json(back.metadata, JSON_VALUES)
    assert back.importance == 0.8


IMPORTANCES = [0.8, 0.1, 0.3, 0.7, 0.123, 0.9999, 0.333333, 1.0, 0.0]


async def test_importance_reads_back_as_written(service: MemoryService) -> None:
    memories = service.memories
    written: list[tuple[float, Memory]] = []
    for i, weight in enumerate(IMPORTANCES):
        added = await memories.add(SCOPE, f"added {i}", importance=weight)
        assert added.importance == weight
        written.append((weight, added))
    batch = await memories.add_many(
        SCOPE, [{"content": f"batched {i}", "importance": w} for i, w in enumerate(IMPORTANCES)]
    )
    written += zip(IMPORTANCES, batch, strict=True)
    for i, weight in enumerate(IMPORTANCES):
        keyed = await memories.put(SCOPE, f"k{i}", f"keyed {i}", importance=weight)
        assert keyed.importance == weight
        updated = await memories.add(SCOPE, f"to update {i}")
        assert (await memories.update(updated.id, importance=weight)).importance == weight
        written.append((weight, updated))
    for weight, memory in written:
        assert (await memories.get(memory.id)).importance == weight
    by_id = {m.id: m for m in await memories.list(SCOPE, limit=1000)}
    for weight, memory in written:
        assert by_id[memory.id].importance == weight
    for hit in await memories.search(SCOPE, "added", k=100, rank="recall"):
        assert str(hit.memory.importance) in {str(w) for w in IMPORTANCES}


# ---------------------------------------------------------------- content

BLANK = {"empty": "", "a space": " ", "whitespace": "\n\t \r", "ideographic space": "\u3000"}

CONTENT_CALLS: dict[str, tuple[str, Call]] = {
    "memories.add": ("content", lambda s, c, v: s.memories.add(SCOPE, v)),
    "memories.add_many (string item)": (
        "items[1].content",
        lambda s, c, v: s.memories.add_many(SCOPE, ["fine", v]),
    ),
    "memories.add_many (mapping item)": (
        "items[1].content",
        lambda s, c, v: s.memories.add_many(SCOPE, ["fine", {"content": v}]),
    ),
    "memories.put": ("content", lambda s, c, v: s.memories.put(SCOPE, "key", v)),
    "memories.update": ("content", lambda s, c, v: s.memories.update(c["memory"], content=v)),
}


@pytest.mark.parametrize("entry", CONTENT_CALLS)
async def test_empty_or_blank_content_is_refused(
    service: MemoryService, ctx: dict[str, Any], entry: str
) -> None:
    field, call = CONTENT_CALLS[entry]
    for value in BLANK.values():
        with pytest.raises(ValidationError) as raised:
            await call(service, ctx, value)
        assert raised.value.field == field
    await _unchanged(service, ctx)
    assert (await service.memories.get(ctx["memory"])).content == "the user prefers metric units"


def test_blank_content_is_refused_by_the_sync_client(sync_service: SyncMemoryService) -> None:
    for value in BLANK.values():
        with pytest.raises(ValidationError) as raised:
            sync_service.memories.add(SCOPE, value)
        assert raised.value.field == "content"
    assert sync_service.memories.count(SCOPE) == 0


async def test_blank_content_is_refused_by_the_importers(
    service: MemoryService, settings: Settings, tmp_path: Path
) -> None:
    for value in BLANK.values():
        with pytest.raises(ValidationError) as raised:
            memory_from_json({"type": "memory", "content": value}, settings)
        assert raised.value.field == "content"
    export = tmp_path / "export.jsonl"
    export.write_text(
        "".join(json.dumps({"type": "memory", "content": v}) + "\n" for v in BLANK.values())
    )
    report = await service.maintenance.import_file(export, allow_truncated=True)  # by hand
    assert report.memories.inserted == 0
    assert report.memories.rejected == len(BLANK)
    sessions = tmp_path / "session.json"
    sessions.write_text(
        json.dumps(
            {"session_id": "s1", "memories": {"notes": {"blank": {"value": " "}, "ok": "kept"}}}
        )
    )
    legacy = await service.maintenance.import_legacy(sessions, tenant="legacy")
    assert [p.reason for p in legacy.load.rejected] == [
        "notes/blank: content: must not be empty or only whitespace"
    ]
    stored = await service.memories.list(Scope("legacy", session="s1"))
    assert [m.content for m in stored] == ["kept"]


# ---------------------------------------------------------------- names, reprs


async def test_an_assembly_name_clash_names_the_name_and_the_scope(service: MemoryService) -> None:
    await service.assemblies.create(SCOPE, "units")
    with pytest.raises(ConflictError) as raised:
        await service.assemblies.create(SCOPE, "units")
    message = str(raised.value)
    assert "'units'" in message
    assert all(f"'{level}'" in message for level in ("acme", "bridge", "planner", "s-42"))
    assert "uq_assemblies_name" not in message
    other = await service.assemblies.create(SCOPE, "other")
    with pytest.raises(ConflictError) as raised:
        await service.assemblies.update(other.id, name="units")
    assert "'units'" in str(raised.value) and "'s-42'" in str(raised.value)
    assert [a.name for a in await service.assemblies.list(SCOPE)] == ["units", "other"]
    # The same name in another scope is no clash.
    await service.assemblies.create(SCOPE.with_session("s-43"), "units")


async def test_reprs_shorten_vectors(service: MemoryService) -> None:
    memory = await service.memories.add(SCOPE, "the user prefers metric units")
    assembly = await service.assemblies.create(SCOPE, "units", memory_ids=[memory.id])
    (hit,) = await service.memories.search(SCOPE, "metric units", k=1, with_embeddings=True)
    (assembly_hit,) = await service.assemblies.search(SCOPE, memory.embedding, k=1)
    for shown in (memory, hit, assembly, assembly_hit):
        text = repr(shown)
        assert "... 384 floats]" in text
        assert len(text) < 1000, text
    assert "content='the user prefers metric units'" in repr(memory)
    bare = await service.memories.get((await service.memories.add(SCOPE, "x y")).id)
    assert repr(bare).startswith("Memory(id=UUID(")
