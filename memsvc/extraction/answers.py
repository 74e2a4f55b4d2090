"""Strict checks of what an extractor answers, before anything is applied.

An answer is refused as a whole when it is not JSON, lacks its list
(``facts`` or ``operations``), or holds more items than the limit: nothing of
it is applied. Otherwise each operation is checked on its own and refused
with a reason when its op is unknown (or not supported by this store), a
field is missing or malformed, its content is oversized, its ``ref`` is not
one of the handles shown (a hallucinated id never reaches a memory), or an
earlier operation of the answer already acts on the same ref. The others go
on to be applied.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from memsvc.core.errors import ValidationError
from memsvc.core.validation import check_text, encode_json
from memsvc.extraction.operations import (
    ADD,
    INVALIDATE,
    NOOP,
    OPERATION_NAMES,
    SUPERSEDE,
    UPDATE,
    Operation,
    Rejected,
)

# The key of a memory's metadata where memsvc records where it came from.
PROVENANCE_KEY = "provenance"

_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)
_RAW_CHARS = 200


@dataclass(frozen=True)
class Limits:
    """How much one answer may hold.

    Attributes:
        max_facts: Candidate facts per batch.
        max_operations: Operations per answer.
        max_content_chars: Characters of one fact or memory written.
        max_metadata_bytes: Size of an ADD's metadata as JSON.
    """

    max_facts: int = 50
    max_operations: int = 50
    max_content_chars: int = 2000
    max_metadata_bytes: int = 4096


@dataclass(frozen=True)
class CheckedFacts:
    """The facts an answer holds, those refused, and whether it was refused whole."""

    facts: tuple[str, ...]
    rejected: tuple[Rejected, ...] = ()
    unusable: bool = False


@dataclass(frozen=True)
class CheckedOperations:
    """The operations accepted (with their position in the answer) and those refused.

    ``created``: for each accepted ADD (by position), the handle later
    operations of the answer name its memory by (``new1`` for the answer's
    first ADD, ``new2`` for its second...).
    """

    accepted: tuple[tuple[int, Operation], ...]
    rejected: tuple[Rejected, ...] = ()
    unusable: bool = False
    created: dict[int, str] = dataclasses.field(default_factory=dict)


def _short(value: object) -> str:
    try:
        text = value if isinstance(value, str) else json.dumps(value, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= _RAW_CHARS else text[:_RAW_CHARS] + "..."


def _decoded(raw: object) -> tuple[object, str | None]:
    """The answer as a JSON value, or why it is not one."""
    if isinstance(raw, bytes | bytearray):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            return None, "the answer is not UTF-8 text"
    if not isinstance(raw, str):
        return raw, None
    fenced = _FENCE.match(raw)
    text = fenced.group(1) if fenced else raw
    try:
        return json.loads(text), None
    except ValueError as exc:
        return None, f"the answer is not JSON ({exc})"


def _whole(reason: str, raw: object, stage: str) -> Rejected:
    return Rejected(None, reason, _short(raw), stage)


def check_facts(raw: object, limits: Limits) -> CheckedFacts:
    """The facts of an answer ``{"facts": [...]}`` (or a bare list), checked."""
    value, problem = _decoded(raw)
    if problem is None:
        if isinstance(value, Mapping):
            value = value.get("facts")
        if not isinstance(value, list):
            problem = "the answer has no 'facts' list"
        elif len(value) > limits.max_facts:
            problem = f"the answer holds {len(value)} facts, over the limit of {limits.max_facts}"
    if problem is not None:
        return CheckedFacts((), (_whole(problem, raw, "facts"),), unusable=True)
    assert isinstance(value, list)
    facts: dict[str, None] = {}
    rejected = []
    for index, item in enumerate(value):
        try:
            facts[_content(item, "fact", limits)] = None
        except ValidationError as exc:
            rejected.append(Rejected(index, exc.reason, _short(item), "facts"))
    return CheckedFacts(tuple(facts), tuple(rejected))


def check_operations(
    raw: object,
    *,
    shown: Collection[str],
    limits: Limits,
    supported: Collection[str] = OPERATION_NAMES,
) -> CheckedOperations:
    """The operations of an answer, each accepted or refused with a reason.

    Args:
        raw: JSON text, a parsed ``{"operations": [...]}`` or list, or a list
            of operation objects.
        shown: The handles shown to the extractor.
        limits: Most operations, content size, metadata size.
        supported: The ops this store can apply; others are refused.
    """
    value, problem = _decoded(raw)
    if problem is None:
        if isinstance(value, Mapping):
            value = value.get("operations")
        if not isinstance(value, list):
            problem = "the answer has no 'operations' list"
        elif len(value) > limits.max_operations:
            problem = (
                f"the answer holds {len(value)} operations, "
                f"over the limit of {limits.max_operations}"
            )
    if problem is not None:
        return CheckedOperations((), (_whole(problem, raw, "operations"),), unusable=True)
    assert isinstance(value, list)
    accepted: list[tuple[int, Operation]] = []
    rejected: list[Rejected] = []
    acted_on: dict[str, int] = {}
    created: dict[int, str] = {}
    adds = 0  # ADDs written so far, refused ones included: newN counts as the model did
    for index, item in enumerate(value):
        plain = _plain(item)
        if isinstance(plain, Mapping) and str(plain.get("op", "")).strip().upper() == "ADD":
            adds += 1
            new_ref = f"{NEW_REF}{adds}"
        else:
            new_ref = None
        try:
            operation = _operation(item, [*shown, *created.values()], limits, supported)
            ref = getattr(operation, "ref", None)
            if ref is not None:
                if ref in acted_on:
                    raise ValidationError(
                        "ref", f"{ref!r} is already acted on by operation {acted_on[ref]}"
                    )
                acted_on[ref] = index
        except ValidationError as exc:
            rejected.append(Rejected(index, _reason(exc), _short(_plain(item))))
            continue
        accepted.append((index, operation))
        if new_ref is not None:
            created[index] = new_ref
    return CheckedOperations(tuple(accepted), tuple(rejected), created=created)


# The handle of the memory an answer's own ADD writes: new1, new2...
NEW_REF = "new"


def _reason(exc: ValidationError) -> str:
    return exc.reason if exc.field in ("op", "ref") else f"{exc.field}: {exc.reason}"


def _plain(item: object) -> object:
    """An operation object as the dict it stands for; anything else as it is."""
    if isinstance(item, ADD | UPDATE | SUPERSEDE | INVALIDATE | NOOP):
        return {"op": item.op, **dataclasses.asdict(item)}
    return item


def _operation(
    item: object, shown: Collection[str], limits: Limits, supported: Collection[str]
) -> Operation:
    item = _plain(item)
    if not isinstance(item, Mapping):
        raise ValidationError("op", "the operation is not a JSON object")
    name = item.get("op")
    if not isinstance(name, str) or name.strip().upper() not in OPERATION_NAMES:
        raise ValidationError(
            "op", f"unknown op {name!r}: must be one of {', '.join(OPERATION_NAMES)}"
        )
    name = name.strip().upper()
    if name not in supported:
        raise ValidationError("op", f"{name} is not supported by this memsvc")
    if name == "NOOP":
        return NOOP()
    if name == "ADD":
        return ADD(
            content=_content(item.get("content"), "content", limits),
            metadata=_metadata(item.get("metadata"), limits),
            importance=_importance(item.get("importance")),
            valid_from=_moment(item.get("valid_from"), "valid_from"),
        )
    ref = _ref(item.get("ref"), shown)
    if name == "UPDATE":
        return UPDATE(ref=ref, content=_content(item.get("content"), "content", limits))
    if name == "SUPERSEDE":
        return SUPERSEDE(
            ref=ref,
            content=_content(item.get("content"), "content", limits),
            valid_from=_moment(item.get("valid_from"), "valid_from"),
            metadata=_metadata(item.get("metadata"), limits),
        )
    return INVALIDATE(ref=ref, at=_moment(item.get("at"), "at"))


def _ref(value: object, shown: Collection[str]) -> str:
    if not isinstance(value, str) or not value:
        raise ValidationError("ref", "the operation needs the 'ref' of a memory shown")
    if value not in shown:
        raise ValidationError("ref", f"unknown ref {_short(value)!r}: not a memory shown")
    return value


def _content(value: object, field: str, limits: Limits) -> str:
    if not isinstance(value, str):
        raise ValidationError(field, "required, a string")
    check_text(field, value)
    text = value.strip()
    if not text:
        raise ValidationError(field, "must not be empty")
    if len(text) > limits.max_content_chars:
        raise ValidationError(
            field, f"is {len(text)} characters, over the limit of {limits.max_content_chars}"
        )
    return text


def _metadata(value: object, limits: Limits) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, list):
        # The shape a strict JSON schema can ask for: [{"key": ..., "value": ...}].
        pairs: dict[str, Any] = {}
        for pair in value:
            if not isinstance(pair, Mapping) or not isinstance(pair.get("key"), str):
                raise ValidationError("metadata", "must be an object or a list of key/value pairs")
            pairs[pair["key"]] = pair.get("value")
        value = pairs
    if not isinstance(value, Mapping):
        raise ValidationError("metadata", "must be a JSON object")
    metadata = {k: v for k, v in value.items() if k != PROVENANCE_KEY}
    # Round-tripped through JSON: what the store will hold, and a copy.
    text = encode_json("metadata", metadata, limits.max_metadata_bytes)
    copied: dict[str, Any] = json.loads(text)
    return copied


def _importance(value: object) -> float:
    if value is None:
        return 0.5
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError("importance", "must be a number in [0, 1]")
    number = float(value)
    if not math.isfinite(number) or not 0.0 <= number <= 1.0:
        raise ValidationError("importance", "must be a number in [0, 1]")
    return number


def _moment(value: object, field: str) -> datetime | None:
    """A moment: a datetime or ISO 8601 text; a date is its midnight, no zone is UTC."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError as exc:
            raise ValidationError(field, f"{_short(value)!r} is not an ISO 8601 date") from exc
    elif isinstance(value, date) and not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day)
    if not isinstance(value, datetime):
        raise ValidationError(field, "must be an ISO 8601 date or date and time")
    if value.tzinfo is None or value.utcoffset() is None:
        value = value.replace(tzinfo=UTC)
    return value
