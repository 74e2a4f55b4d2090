"""What ``svc.remember`` returns: :class:`RememberResult`."""

from __future__ import annotations

from dataclasses import dataclass

from memsvc.core.models import Memory
from memsvc.extraction.operations import Operation, Rejected


@dataclass(frozen=True)
class Applied:
    """An operation applied, and the memory it wrote or changed.

    Attributes:
        operation: The operation as checked (``ref`` is the handle shown).
        memory: The memory written or changed (None for NOOP). An ADD of
            content the scope already holds returns the stored memory.
        index: Its position in the extractor's answer.
    """

    operation: Operation
    memory: Memory | None
    index: int


@dataclass(frozen=True)
class RememberResult:
    """What one ``remember`` call did.

    Attributes:
        applied: Operations applied, in the answer's order, batch by batch.
        skipped: Operations (or whole answers, or facts) refused, each with its reason.
        remembered: Ids of the messages this call applied (their batch committed).
        already_remembered: Ids skipped because an earlier call applied them.
        pending: Ids not applied because the extractor's answer was unusable
            as a whole (or every operation of it was refused): calling again
            asks again.
        model_calls: Calls made to the extractor (facts and operations).
    """

    applied: tuple[Applied, ...] = ()
    skipped: tuple[Rejected, ...] = ()
    remembered: tuple[str, ...] = ()
    already_remembered: tuple[str, ...] = ()
    pending: tuple[str, ...] = ()
    model_calls: int = 0

    @property
    def memories(self) -> list[Memory]:
        """The memories written or changed, in order."""
        return [a.memory for a in self.applied if a.memory is not None]
