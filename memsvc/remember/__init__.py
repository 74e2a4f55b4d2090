"""``svc.remember``: conversation messages into memories, each message applied once.

The pipeline (:mod:`memsvc.remember.pipeline`): the scope's ledger of
remembered messages (table ``remembered_messages``, SQL in
:mod:`memsvc.remember.queries`), candidate memories by hybrid search
(:mod:`memsvc.remember.candidates`), and one transaction per batch applying
an extractor's checked operations (:mod:`memsvc.remember.apply`). The
extractor itself, and the checks of its answers, are in
:mod:`memsvc.extraction`.

May import: ``memsvc.memories``, ``memsvc.extraction``, ``memsvc.db``,
``memsvc.core``; it speaks the memory repository's public methods only.
"""

from __future__ import annotations

from memsvc.remember.pipeline import Remembering
from memsvc.remember.result import Applied, RememberResult

__all__ = ["Applied", "RememberResult", "Remembering"]
