"""The two protocols apps can implement: :class:`Extractor` and :class:`Summarizer`.

An extractor answers in two steps for one batch of messages: the candidate
facts the messages state (:meth:`Extractor.facts`), then, shown the memories
most related to each fact under short handles, the operations to apply
(:meth:`Extractor.operations`). Either step may return JSON text, a parsed
JSON value, or (operations) a list of operation objects: memsvc validates
whatever comes back the same strict way (:mod:`memsvc.extraction.answers`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from memsvc.extraction.messages import Message, message_payload
from memsvc.extraction.operations import OPERATION_NAMES


@dataclass(frozen=True)
class Candidate:
    """A stored memory shown to the extractor, under its handle.

    Attributes:
        ref: The handle (``m1``...) the extractor names it by.
        content: Its text.
        created_at: When it was first written.
        valid_from: When the fact became true, where the store records it.
    """

    ref: str
    content: str
    created_at: datetime
    valid_from: datetime | None = None

    def payload(self) -> dict[str, Any]:
        """What the model is shown of the memory (never its id or metadata)."""
        shown: dict[str, Any] = {
            "ref": self.ref,
            "content": self.content,
            "created_at": self.created_at.isoformat(),
        }
        if self.valid_from is not None:
            shown["valid_from"] = self.valid_from.isoformat()
        return shown


@dataclass(frozen=True)
class Fact:
    """A candidate fact and the handles of the memories most related to it."""

    text: str
    refs: tuple[str, ...]


@dataclass(frozen=True)
class ExtractionRequest:
    """What the extractor is asked to decide on for one batch.

    Attributes:
        messages: The batch's new messages, oldest first.
        facts: The candidate facts, each with its related memories' handles.
        candidates: Every memory shown, once each, by handle.
        max_operations: Most operations an answer may hold.
        allowed: The operations this store can apply.
    """

    messages: tuple[Message, ...]
    facts: tuple[Fact, ...]
    candidates: tuple[Candidate, ...]
    max_operations: int
    allowed: tuple[str, ...] = OPERATION_NAMES

    def payload(self) -> dict[str, Any]:
        """The request as JSON for a model: messages, facts with refs, memories."""
        return {
            "messages": [message_payload(m) for m in self.messages],
            "facts": [{"fact": f.text, "related": list(f.refs)} for f in self.facts],
            "memories": [c.payload() for c in self.candidates],
            "allowed": list(self.allowed),
            "max_operations": self.max_operations,
        }


@runtime_checkable
class Extractor(Protocol):
    """Decides what a conversation adds to, or changes in, long-term memory.

    Attributes:
        name: Recorded in each memory's provenance (``openai-chat``).
        version: Of its prompt or logic, recorded likewise.
        model: The model answering, recorded likewise (None: no model).
    """

    name: str
    version: str
    model: str | None

    async def facts(self, messages: Sequence[Message]) -> object:
        """The facts ``messages`` state: ``{"facts": ["...", ...]}`` (text or parsed)."""
        ...

    async def operations(self, request: ExtractionRequest) -> object:
        """The operations to apply: ``{"operations": [...]}``, or a list of operations."""
        ...


@dataclass(frozen=True)
class SummaryMember:
    """One memory of a cluster to summarize.

    Attributes:
        content: Its text.
        embedding: Its vector, when the store has one.
        created_at: When it was written, if known.
    """

    content: str
    embedding: Sequence[float] | None = None
    created_at: datetime | None = None


@runtime_checkable
class Summarizer(Protocol):
    """Writes one memory that stands for a cluster of related ones.

    Attributes:
        name: Recorded in the summary's provenance.
        version: Of its prompt or logic.
        model: The model answering (None: no model).
    """

    name: str
    version: str
    model: str | None

    async def summarize(self, members: Sequence[SummaryMember]) -> str:
        """The summary's text."""
        ...
