"""What one erasure run works from: the scope, the cut, its keys, what it removed.

Shared by the erasing passes (:mod:`memsvc.erasure.eraser`) and the check that
follows them (:mod:`memsvc.erasure.check`).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from memsvc.core.scope import LEVELS, Include, Scope
from memsvc.db.sql import Params, scope_condition
from memsvc.erasure.texts import ErasedTexts


@dataclass
class ErasurePlan:
    """One erasure's fixed inputs, and the texts it removed so far.

    Attributes:
        scope: What is erased.
        include: ``"descendants"`` or ``"exact"``.
        batch_size: Rows per transaction.
        snapshot: ``pg_current_snapshot()`` when the erasure began (text):
            rows whose creating transaction it shows committed are erased.
        texts: Fingerprints (on disk) of every text removed.
        pseudonym_key: Random, in this process only: the key of the
            pseudonyms that replace ids below the named level.
    """

    scope: Scope
    include: Include
    batch_size: int
    snapshot: str
    texts: ErasedTexts
    pseudonym_key: bytes = field(default_factory=lambda: secrets.token_bytes(32))

    @property
    def whole_tenant(self) -> bool:
        """A whole tenant is erased (LangGraph's rows too)."""
        return self.include == "descendants" and self.scope.depth == 0

    @property
    def depth(self) -> int:
        """The deepest level the caller named: ids below it become pseudonyms (3: none)."""
        return 3 if self.include == "exact" else self.scope.depth

    @property
    def pseudonym_args(self) -> list[bytes]:
        """The pseudonym key as the last argument of a statement that may rename (none at 3)."""
        return [self.pseudonym_key] if self.depth < 3 else []

    def scope_sql(self, params: Params, alias: str = "") -> str:
        """Rows of the erased scope (by the row's own scope columns)."""
        return scope_condition(self.scope, self.include, params, alias)

    def kept(self) -> dict[str, str]:
        """What identifies the erased scope after the erasure, per column, and why."""
        kept = {
            "tenant_id": "named by the caller; kept in tombstones and ledger events: the "
            "tenant is every row's partition and row-level-security key",
        }
        for level in range(1, 4):
            column = f"{LEVELS[level]}_id"
            if level > self.depth:
                kept[column] = (
                    "replaced in tombstones and ledger events by a pseudonym "
                    "('erased:' and 32 hex digits, one per scope and erasure) under a key "
                    "that existed only in the erasing process: it cannot be turned back"
                )
            elif self.scope.levels[level] is None:
                kept[column] = "not set in the erased scope"
            else:
                kept[column] = (
                    "named by the caller; kept in tombstones and ledger events so that "
                    "followers of the scope learn what was erased"
                )
        kept["memory_id"] = (
            "kept in each tombstone with its version and times: the change feed tells "
            "followers which memory to drop (random ids, unless the app chose them)"
        )
        kept["entity_id"] = (
            "kept in the 'deleted' ledger event of each assembly and checkpoint, likewise"
        )
        return kept
