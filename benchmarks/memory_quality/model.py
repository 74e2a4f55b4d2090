"""The dataset: conversations, the operations a perfect extractor applies, the answer key.

A stream is a list of sessions; a session an ordered list of messages (id,
role, timestamp, text). Each message carries the ground-truth operations an
extractor should derive from it, in order:

- ``Add``: write one memory (``memory`` is its key, ``{message id}#{n}``).
  ``kind`` is ``fact`` (it states ``fact``, one version of one slot of one
  person), ``event`` (about a person, but no fact: a trip, an interview, a
  project that ended) or ``note`` (about no one). ``valid_from`` is when the
  fact started to hold (for an event or a note: when it was said).
  ``supersedes`` lists the keys of the memories this one ends at its
  ``valid_from``: every memory still current that states an earlier version
  of the same slot. ``about`` is the person a fact or an event is about.
- ``Invalidate``: the memories ``memories`` stopped holding ``at`` (a project
  that ended without a successor).

Memories with the same ``fact`` are paraphrases of one fact. ``Fact`` holds
each fact's value and validity; ``Question`` a question, the person and slot
it is about, the fact that answers it, and for a past question the moment to
ask about (``valid_at``).
Everything is plain JSON (``Dataset.to_json``), so an extraction pipeline
can replay the conversations and be scored against the same key.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

FORMAT = 1

MemoryKind = Literal["fact", "event", "note"]
QuestionKind = Literal["current", "past", "paraphrase"]


@dataclass
class Add:
    memory: str
    content: str
    kind: MemoryKind
    valid_from: str
    fact: str | None = None
    supersedes: list[str] = field(default_factory=list)
    about: str | None = None  # the person it is about (None: a note)
    op: Literal["add"] = "add"


@dataclass
class Invalidate:
    memories: list[str]
    at: str
    fact: str
    op: Literal["invalidate"] = "invalidate"


Operation = Add | Invalidate


@dataclass
class Message:
    id: str
    role: Literal["user", "assistant"]
    at: str
    text: str
    ops: list[Operation] = field(default_factory=list)


@dataclass
class Session:
    id: str
    started: str
    messages: list[Message]


@dataclass
class Person:
    id: str
    name: str
    relation: str


@dataclass
class Fact:
    id: str
    person: str
    slot: str
    version: int
    value: str
    valid_from: str
    # None: still true at the end of the history.
    valid_to: str | None
    # True when it stopped holding with nothing in its place (yet).
    ended: bool = False


@dataclass
class Question:
    id: str
    kind: QuestionKind
    stream: str
    text: str
    answer: str
    about: str  # the person asked about
    slot: str  # and which of their facts
    valid_at: str | None = None


@dataclass
class Dataset:
    seed: int
    sizes: dict[str, int]
    people: list[Person]
    facts: list[Fact]
    streams: dict[str, list[Session]]
    questions: list[Question]
    format: int = FORMAT

    def adds(self, stream: str) -> list[tuple[Message, Add]]:
        """Every memory write of a stream, in order."""
        return [
            (message, op)
            for session in self.streams[stream]
            for message in session.messages
            for op in message.ops
            if isinstance(op, Add)
        ]

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, separators=(",", ":"))

    def digest(self) -> str:
        """A short hash of the whole dataset: equal digests, equal data."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    @classmethod
    def from_json(cls, text: str) -> Dataset:
        raw = json.loads(text)
        if raw.get("format") != FORMAT:
            raise ValueError(f"dataset format {raw.get('format')!r}, this reader knows {FORMAT}")
        return cls(
            seed=raw["seed"],
            sizes=raw["sizes"],
            people=[Person(**p) for p in raw["people"]],
            facts=[Fact(**f) for f in raw["facts"]],
            streams={
                name: [_session(s) for s in sessions] for name, sessions in raw["streams"].items()
            },
            questions=[Question(**q) for q in raw["questions"]],
        )

    def describe(self) -> dict[str, Any]:
        figures: dict[str, Any] = {"seed": self.seed, **self.sizes, "digest": self.digest()}
        for name, sessions in self.streams.items():
            messages = [m for s in sessions for m in s.messages]
            ops = [op for m in messages for op in m.ops]
            adds = [op for op in ops if isinstance(op, Add)]
            figures[name] = {
                "sessions": len(sessions),
                "messages": len(messages),
                "memories": len(adds),
                "by_kind": dict(Counter(op.kind for op in adds)),
                "distinct_facts": len({op.fact for op in adds if op.fact}),
                "superseding": sum(bool(op.supersedes) for op in adds),
                "invalidations": sum(isinstance(op, Invalidate) for op in ops),
            }
        figures["questions"] = dict(Counter(f"{q.stream}/{q.kind}" for q in self.questions))
        return figures


def _operation(raw: dict[str, Any]) -> Operation:
    fields = {key: value for key, value in raw.items() if key != "op"}
    if raw["op"] == "add":
        return Add(**fields)
    if raw["op"] == "invalidate":
        return Invalidate(**fields)
    raise ValueError(f"unknown operation {raw['op']!r}")


def _session(raw: dict[str, Any]) -> Session:
    messages = [
        Message(
            id=m["id"],
            role=m["role"],
            at=m["at"],
            text=m["text"],
            ops=[_operation(op) for op in m["ops"]],
        )
        for m in raw["messages"]
    ]
    return Session(id=raw["id"], started=raw["started"], messages=messages)


def problems(dataset: Dataset) -> list[str]:
    """What is inconsistent in a dataset's answer key (empty: nothing).

    Every write has a unique key; a superseded or invalidated memory was
    written earlier and states an earlier version of the same slot (or, for
    an invalidation, the fact named); messages are in time order; a fact is
    never told before it holds; every question's answer is a fact its
    stream states, and a past question asks about a moment the fact held.
    """
    found: list[str] = []
    facts = {fact.id: fact for fact in dataset.facts}
    for stream, sessions in dataset.streams.items():
        written: dict[str, Add] = {}
        last = ""
        for message in (m for s in sessions for m in s.messages):
            if message.at < last:
                found.append(f"{message.id}: earlier than the message before it")
            last = message.at
            for op in message.ops:
                found += _op_problems(message, op, written, facts)
                if isinstance(op, Add):
                    if op.memory in written:
                        found.append(f"{op.memory}: written twice")
                    written[op.memory] = op
        stated = {op.fact for op in written.values() if op.fact}
        for question in (q for q in dataset.questions if q.stream == stream):
            fact = facts.get(question.answer)
            if fact is None or question.answer not in stated:
                found.append(f"{question.id}: answer {question.answer} never stated in {stream}")
            elif (fact.person, fact.slot) != (question.about, question.slot):
                found.append(
                    f"{question.id}: about {question.about}/{question.slot}, not {fact.id}"
                )
            elif question.valid_at is not None and not (
                fact.valid_from <= question.valid_at
                and (fact.valid_to is None or question.valid_at < fact.valid_to)
            ):
                found.append(f"{question.id}: {question.answer} did not hold at valid_at")
    return found


def _op_problems(
    message: Message, op: Operation, written: dict[str, Add], facts: dict[str, Fact]
) -> list[str]:
    found: list[str] = []
    if isinstance(op, Invalidate):
        for key in op.memories:
            if key not in written or written[key].fact != op.fact:
                found.append(f"{message.id}: invalidates {key}, not an earlier memory of {op.fact}")
        return found
    if op.kind != "fact":
        return [f"{op.memory}: a {op.kind} that supersedes"] if op.supersedes else []
    fact = facts.get(op.fact or "")
    if fact is None:
        return [f"{op.memory}: states unknown fact {op.fact}"]
    if op.about != fact.person:
        found.append(f"{op.memory}: about {op.about}, stating a fact of {fact.person}")
    if fact.valid_from > message.at:
        found.append(f"{op.memory}: told before {fact.id} holds")
    for key in op.supersedes:
        older = facts.get(written[key].fact or "") if key in written else None
        if older is None or (older.person, older.slot) != (fact.person, fact.slot):
            found.append(f"{op.memory}: supersedes {key}, not an earlier memory of its slot")
        elif older.version >= fact.version:
            found.append(f"{op.memory}: supersedes {key}, a version not older")
    return found


def validity(dataset: Dataset, stream: str) -> dict[str, tuple[str, str | None]]:
    """Each memory's ``[valid_from, valid_to)`` once the stream's operations are applied.

    What a store that applied the answer key perfectly holds (None: still
    valid); a pipeline's store can be compared with it.
    """
    spans: dict[str, tuple[str, str | None]] = {}
    for message in (m for s in dataset.streams[stream] for m in s.messages):
        for op in message.ops:
            if isinstance(op, Add):
                spans[op.memory] = (op.valid_from, None)
                ended, at = op.supersedes, op.valid_from
            else:
                ended, at = op.memories, op.at
            for key in ended:
                spans[key] = (spans[key][0], at)
    return spans
