"""``svc.remember``: conversation messages into memories, each message applied once.

The pipeline (:mod:`memsvc.remember.pipeline`): the scope's ledger of
remembered messages (table ``remembered_messages``, SQL in
:mod:`memsvc.remember.queries`), candidate memories by hybrid search
(:mod:`memsvc.remember.candidates`), and one transaction per batch applying
an extractor's checked operations (:mod:`memsvc.remember.apply`). The
extractor itself, and the checks of its answers, are in
:mod:`memsvc.extraction`.

:class:`SessionMemory` (:mod:`memsvc.remember.session`) is the working
memory ``svc.working(scope)`` returns: it remembers a session's scratchpad
into long-term memory through the same pipeline.

May import: ``memsvc.memories``, ``memsvc.working``, ``memsvc.extraction``,
``memsvc.db``, ``memsvc.core``; it speaks the memory repository's public
methods only.
"""

from __future__ import annotations

from memsvc.remember.pipeline import Remembering
from memsvc.remember.result import Applied, RememberResult
from memsvc.remember.session import ScratchpadConsolidation, SessionMemory

__all__ = [
    "Applied",
    "RememberResult",
    "Remembering",
    "ScratchpadConsolidation",
    "SessionMemory",
]
