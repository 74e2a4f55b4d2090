"""An extractor's answer is checked strictly: each bad operation refused with a reason."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from memsvc.extraction import ADD, INVALIDATE, NOOP, SUPERSEDE, UPDATE, Limits
from memsvc.extraction.answers import check_facts, check_operations
from tests.extraction.fake_chat import add, invalidate, noop, operations, supersede, update

SHOWN = ("m1", "m2", "m3")
LIMITS = Limits(max_facts=3, max_operations=5, max_content_chars=40, max_metadata_bytes=64)


def check(raw: object, **options: object) -> tuple[list[object], list[tuple[int | None, str]]]:
    shown = options.pop("shown", SHOWN)
    limits = options.pop("limits", LIMITS)
    checked = check_operations(raw, shown=shown, limits=limits, **options)  # type: ignore[arg-type]
    return [op for _, op in checked.accepted], [(r.index, r.reason) for r in checked.rejected]


def test_a_good_answer_becomes_operations_of_each_kind() -> None:
    answer = operations(
        add("Ana lives in Berlin.", importance=0.9, valid_from="2024-06-01",
            metadata=[{"key": "kind", "value": "residence"}]),
        update("m1", "Ana's daughter is Eva, born 2019."),
        supersede("m2", "Ana works at Globex.", "2024-07-01T09:00:00+02:00"),
        invalidate("m3"),
    )
    accepted, rejected = check(json.dumps(answer))
    assert rejected == []
    assert accepted == [
        ADD("Ana lives in Berlin.", {"kind": "residence"}, 0.9, datetime(2024, 6, 1, tzinfo=UTC)),
        UPDATE("m1", "Ana's daughter is Eva, born 2019."),
        SUPERSEDE(
            "m2", "Ana works at Globex.", datetime.fromisoformat("2024-07-01T09:00:00+02:00")
        ),
        INVALIDATE("m3", None),
    ]


def test_a_supersede_carries_the_new_facts_metadata() -> None:
    answer = operations(
        {**supersede("m2", "Ana works at Globex."), "metadata": [{"key": "slot", "value": "job"}]}
    )
    accepted, rejected = check(json.dumps(answer))
    assert rejected == []
    assert accepted == [SUPERSEDE("m2", "Ana works at Globex.", None, {"slot": "job"})]


def test_an_answer_may_name_the_memory_its_own_earlier_add_writes() -> None:
    answer = operations(
        add("Ana lives in Paris."),
        add("Ana has a dog."),
        supersede("new1", "Ana lives in Berlin."),
        invalidate("new3"),  # no third ADD before it
        update("new2", "Ana has a dog, Rex."),
        noop(),
    )
    roomy = Limits(max_operations=10, max_content_chars=40)
    checked = check_operations(json.dumps(answer), shown=SHOWN, limits=roomy)
    assert [(i, op.op) for i, op in checked.accepted] == [
        (0, "ADD"), (1, "ADD"), (2, "SUPERSEDE"), (4, "UPDATE"), (5, "NOOP")
    ]
    assert checked.created == {0: "new1", 1: "new2"}
    assert [(r.index, r.reason) for r in checked.rejected] == [
        (3, "unknown ref 'new3': not a memory shown")
    ]
    # A refused ADD still counts: the model numbered it.
    refused_first = operations(add(""), add("Ana has a cat."), supersede("new1", "x"))
    checked = check_operations(json.dumps(refused_first), shown=SHOWN, limits=LIMITS)
    assert checked.created == {1: "new2"}
    assert [r.index for r in checked.rejected] == [0, 2]


def test_an_answer_that_is_not_json_is_refused_whole() -> None:
    checked = check_operations("Sure! Here you go: ADD Ana", shown=SHOWN, limits=LIMITS)
    assert checked.unusable and checked.accepted == ()
    [rejected] = checked.rejected
    assert rejected.index is None and rejected.reason.startswith("the answer is not JSON")
    assert "Sure! Here you go" in rejected.raw


def test_an_answer_of_the_wrong_shape_is_refused_whole() -> None:
    for raw in ('{"ops": []}', "[1, 2", '"ADD"', '{"operations": {"op": "ADD"}}'):
        checked = check_operations(raw, shown=SHOWN, limits=LIMITS)
        assert checked.unusable, raw
        assert checked.accepted == ()


def test_too_many_operations_refuse_the_whole_answer() -> None:
    checked = check_operations(
        operations(*(noop() for _ in range(6))), shown=SHOWN, limits=LIMITS
    )
    assert checked.unusable
    assert checked.rejected[0].reason == "the answer holds 6 operations, over the limit of 5"


def test_each_bad_operation_is_refused_with_its_reason_and_the_others_go_on() -> None:
    answer = operations(
        add("Ana lives in Berlin."),
        {"op": "FORGET", "ref": "m1"},
        update("m9", "hallucinated"),
        update("3f2a8c1e-0000-4000-8000-000000000000", "a raw id"),
        "not an object",
    )
    accepted, rejected = check({"operations": answer["operations"]})
    assert accepted == [ADD("Ana lives in Berlin.")]
    assert rejected == [
        (1, "unknown op 'FORGET': must be one of ADD, UPDATE, SUPERSEDE, INVALIDATE, NOOP"),
        (2, "unknown ref 'm9': not a memory shown"),
        (3, "unknown ref '3f2a8c1e-0000-4000-8000-000000000000': not a memory shown"),
        (4, "the operation is not a JSON object"),
    ]


def test_malformed_fields_are_refused_naming_the_field() -> None:
    accepted, rejected = check(
        operations(
            add("x" * 41),
            add("   "),
            {"op": "ADD"},
            add("ok", importance=1.5),
            add("ok", importance=True),
            add("ok", valid_from="last spring"),
            add("ok", metadata={"blob": "y" * 100}),
            add("ok", metadata="kind=preference"),
            update("m1", None),  # type: ignore[arg-type]
            {"op": "UPDATE", "content": "no ref"},
            add("nul \x00 byte"),
        )["operations"],
        limits=Limits(max_operations=20, max_content_chars=40, max_metadata_bytes=64),
    )
    assert accepted == []
    reasons = dict(rejected)
    assert reasons[0] == "content: is 41 characters, over the limit of 40"
    assert reasons[1] == "content: must not be empty"
    assert reasons[2] == "content: required, a string"
    assert reasons[3] == "importance: must be a number in [0, 1]"
    assert reasons[4] == "importance: must be a number in [0, 1]"
    assert reasons[5] == "valid_from: 'last spring' is not an ISO 8601 date"
    assert reasons[6].startswith("metadata: is ") and "over the limit of 64" in reasons[6]
    assert reasons[7] == "metadata: must be a JSON object"
    assert reasons[8] == "content: required, a string"
    assert reasons[9] == "the operation needs the 'ref' of a memory shown"
    assert reasons[10] == "content: must not contain NUL bytes"


def test_a_second_operation_on_the_same_ref_is_refused() -> None:
    accepted, rejected = check(operations(update("m1", "a"), invalidate("m1"), update("m2", "b")))
    assert accepted == [UPDATE("m1", "a"), UPDATE("m2", "b")]
    assert rejected == [(1, "'m1' is already acted on by operation 0")]


def test_operations_the_store_cannot_apply_are_refused_as_not_supported() -> None:
    accepted, rejected = check(
        operations(supersede("m1", "new"), invalidate("m2"), noop()),
        supported=("ADD", "UPDATE", "NOOP"),
    )
    assert accepted == [NOOP()]
    assert rejected == [
        (0, "SUPERSEDE is not supported by this memsvc"),
        (1, "INVALIDATE is not supported by this memsvc"),
    ]


def test_operation_objects_and_fenced_json_are_checked_the_same_way() -> None:
    accepted, rejected = check([ADD("fine"), UPDATE("m7", "hallucinated"), NOOP()])
    assert accepted == [ADD("fine"), NOOP()]
    assert rejected == [(1, "unknown ref 'm7': not a memory shown")]
    fenced = "```json\n" + json.dumps(operations(add("from a fence"))) + "\n```"
    assert check(fenced)[0] == [ADD("from a fence")]


def test_metadata_keeps_the_extractors_keys_but_never_its_provenance() -> None:
    accepted, _ = check(operations(add("x", metadata={"kind": "pref", "provenance": "forged"})))
    assert accepted == [ADD("x", {"kind": "pref"})]


def test_op_names_are_read_in_any_case_and_dates_without_a_zone_as_utc() -> None:
    accepted, _ = check(
        {"operations": [{"op": "add", "content": "x", "valid_from": "2024-03-01T10:00:00"}]}
    )
    assert accepted == [ADD("x", valid_from=datetime(2024, 3, 1, 10, tzinfo=UTC))]


def test_facts_are_checked_and_a_bad_answer_refused_whole() -> None:
    checked = check_facts('{"facts": ["Ana lives in Berlin.", "  ", "Ana lives in Berlin."]}',
                          LIMITS)
    assert checked.facts == ("Ana lives in Berlin.",)
    assert [(r.index, r.reason, r.stage) for r in checked.rejected] == [
        (1, "must not be empty", "facts")
    ]
    assert check_facts(["a", "b"], LIMITS).facts == ("a", "b")
    for raw in ("nope", '{"fact": []}', '{"facts": ["a", "b", "c", "d"]}'):
        bad = check_facts(raw, LIMITS)
        assert bad.unusable and bad.facts == (), raw


@pytest.mark.parametrize("raw", [b'{"operations": []}', {"operations": []}, "[]"])
def test_an_empty_answer_is_valid_and_holds_nothing(raw: object) -> None:
    checked = check_operations(raw, shown=SHOWN, limits=LIMITS)
    assert not checked.unusable and checked.accepted == () and checked.rejected == ()
