"""A session's working memory that hands its scratchpad to long-term memory at its end.

``svc.working(scope)`` returns a :class:`SessionMemory`: the
:class:`~memsvc.working.WorkingMemory` of the session, plus
:meth:`SessionMemory.consolidate`, which remembers the scratchpad's entries
into the session scope's long-term memory (``svc.remember``) and removes
the entries it consumed.

Each entry is a message whose id is a digest of the entry as stored (its
text and timestamp), so the ledger of remembered messages knows it again:
remembering it twice applies it once. The entries are removed only after
the transaction that applied them committed, and only those entries (one
appended meanwhile stays). A crash before that commit leaves an entry in
the scratchpad and not remembered; after it, remembered and possibly still
in the scratchpad, which the next ``consolidate`` removes without applying
it again.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from memsvc.core.errors import ValidationError
from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.extraction.messages import ROLES
from memsvc.extraction.protocols import Extractor
from memsvc.remember.pipeline import Remembering
from memsvc.remember.result import RememberResult
from memsvc.working import WorkingMemory, WorkingStore
from memsvc.working.memory import CheckpointRepository

ID_PREFIX = "scratchpad:"


@dataclass(frozen=True)
class ScratchpadConsolidation:
    """What :meth:`SessionMemory.consolidate` did.

    Attributes:
        result: What ``remember`` did with the entries (each entry's message
            id is ``scratchpad:`` and a digest of the entry).
        cleared: Entries removed from the scratchpad: remembered now, or
            by an earlier call.
        kept: Entries left in the scratchpad because the extractor's answer
            about them was unusable (``result.pending``): a later call asks again.
    """

    result: RememberResult
    cleared: int
    kept: int


def entry_messages(entries: list[str], role: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The scratchpad's stored entries as messages, and each message id's entry."""
    messages: list[dict[str, Any]] = []
    by_id: dict[str, str] = {}
    seen: Counter[str] = Counter()
    for stored in entries:
        seen[stored] += 1  # the same note twice in the same microsecond: two messages
        digest = hashlib.sha256(f"{seen[stored]}\x00{stored}".encode()).hexdigest()[:32]
        message_id = ID_PREFIX + digest
        entry = json.loads(stored)
        message: dict[str, Any] = {"role": role, "content": entry["content"], "id": message_id}
        if entry.get("timestamp"):
            message["at"] = entry["timestamp"]
        messages.append(message)
        by_id[message_id] = stored
    return messages, by_id


class SessionMemory(WorkingMemory):
    """The working memory of a session, with the service's long-term memory behind it.

    Everything :class:`~memsvc.working.WorkingMemory` does, plus
    :meth:`consolidate`. ``svc.working(scope)`` makes them.
    """

    def __init__(
        self,
        scope: Scope,
        store: WorkingStore,
        settings: Settings,
        checkpoints: CheckpointRepository | None,
        *,
        remembering: Remembering,
    ) -> None:
        super().__init__(scope, store, settings, checkpoints)
        self._remembering = remembering

    async def consolidate(
        self,
        extractor: Extractor | None = None,
        *,
        role: str = "user",
        k_candidates: int = 10,
    ) -> ScratchpadConsolidation:
        """Remember the scratchpad into the session scope's long-term memory, then clear it.

        Every entry goes to ``remember`` as a message of ``role`` (``user``
        by default: the extractor reads the notes as what the session
        learned), with its timestamp as ``at``; the entries applied (now
        or by an earlier call) are removed from the scratchpad, each
        exactly once, and entries appended meanwhile stay. Safe to call
        again after a crash: an entry already remembered is not applied
        twice. See the module docstring and docs/how-to/working-memory.md.

        Args:
            extractor: As for ``svc.remember`` (default: the service's).
            role: The role the entries are sent with.
            k_candidates: As for ``svc.remember``.

        Raises:
            ValidationError: A bad ``role``, or no extractor.
            ExtractionError: The extractor's endpoint failed (entries of
                batches applied before stay remembered; all stay in the
                scratchpad until a call succeeds).
        """
        if role not in ROLES:
            raise ValidationError("role", f"must be one of {', '.join(ROLES)}")
        entries = await self.store.get_scratchpad(self.scope)
        messages, by_id = entry_messages(entries, role)
        if not messages:
            return ScratchpadConsolidation(RememberResult(), 0, 0)
        result = await self._remembering.remember(
            self.scope, messages, extractor=extractor, k_candidates=k_candidates
        )
        consumed = {*result.remembered, *result.already_remembered}
        done = [stored for message_id, stored in by_id.items() if message_id in consumed]
        cleared = await self.store.remove_scratchpad_entries(self.scope, done)
        return ScratchpadConsolidation(result, cleared, len(messages) - len(done))
