"""What an extractor may ask memsvc to do with one batch of messages.

Five operations, named as the extractor names them on the wire (``"op":
"ADD"``): :class:`ADD` a new fact, :class:`UPDATE` a shown memory's wording,
:class:`SUPERSEDE` a shown memory with a new fact from a moment on,
:class:`INVALIDATE` a shown memory (it stopped being true), or :class:`NOOP`.
A memory is named by its ``ref``: the short handle (``m1``, ``m2``...) memsvc
gave it when it showed it to the extractor, never its id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

# Wire names, in the order the prompt lists them.
OPERATION_NAMES = ("ADD", "UPDATE", "SUPERSEDE", "INVALIDATE", "NOOP")


@dataclass(frozen=True)
class ADD:
    """Remember a new fact.

    Attributes:
        content: The fact, as one self-contained sentence.
        metadata: JSON object stored with it (``provenance`` is memsvc's).
        importance: In [0, 1].
        valid_from: When the fact became true (None: now).
    """

    content: str
    metadata: dict[str, Any] = field(default_factory=dict)
    importance: float = 0.5
    valid_from: datetime | None = None
    op: ClassVar[str] = "ADD"


@dataclass(frozen=True)
class UPDATE:
    """Reword a shown memory, the fact unchanged (a correction, a detail added).

    Attributes:
        ref: The shown memory's handle.
        content: Its new wording.
    """

    ref: str
    content: str
    op: ClassVar[str] = "UPDATE"


@dataclass(frozen=True)
class SUPERSEDE:
    """Replace a shown memory by a new fact, true from ``valid_from`` on.

    Attributes:
        ref: The shown memory's handle.
        content: The fact that replaces it.
        valid_from: When the new fact became true (None: now).
        metadata: JSON object stored with the new memory, as for ADD.
    """

    ref: str
    content: str
    valid_from: datetime | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    op: ClassVar[str] = "SUPERSEDE"


@dataclass(frozen=True)
class INVALIDATE:
    """A shown memory stopped being true at ``at``, with nothing replacing it.

    Attributes:
        ref: The shown memory's handle.
        at: When it stopped being true (None: now).
    """

    ref: str
    at: datetime | None = None
    op: ClassVar[str] = "INVALIDATE"


@dataclass(frozen=True)
class NOOP:
    """Nothing to remember (already known, or noise)."""

    op: ClassVar[str] = "NOOP"


Operation = ADD | UPDATE | SUPERSEDE | INVALIDATE | NOOP
"""Any one of the five operations."""


def ref_of(operation: Operation) -> str | None:
    """The handle an operation acts on (None for ADD and NOOP)."""
    return getattr(operation, "ref", None)


@dataclass(frozen=True)
class Rejected:
    """An operation (or a whole answer) memsvc refused, and why.

    Attributes:
        index: Position of the operation (or fact) in the answer (None: the
            answer as a whole).
        reason: Why, in words for a log.
        raw: What the extractor sent for it, shortened (for a log).
        stage: ``"operations"``, ``"facts"`` or ``"apply"`` (refused by the store).
    """

    index: int | None
    reason: str
    raw: str = ""
    stage: str = "operations"
