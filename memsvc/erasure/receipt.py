"""What an erasure hands back: :class:`ErasureReceipt`."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from memsvc.core.scope import Scope


@dataclass
class ErasureReceipt:
    """What an erasure removed, and what a check afterwards found.

    Attributes:
        scope: The scope erased.
        include: ``"descendants"`` (the scope and everything under it) or ``"exact"``.
        removed: Rows removed per table (``memory_events`` counts the history
            removed; ``erased`` tombstones written are under ``tombstones``,
            ids replaced by pseudonyms in older tombstones and ledger events
            under ``pseudonymized``), plus ``working_sessions``: sessions
            dropped from working memory.
        started: When the erasure began (the database's clock).
        finished: When the check ended (the database's clock).
        verified: True when the check found nothing of the scope left; what
            it looked at is in ``checked``.
        remaining: What the check found, per table, ``table.column`` or
            ``working_memory_keys`` (empty when ``verified``). It never names
            a row of another scope.
        written_during: Rows of the scope created by transactions that had
            not committed when the erasure began, per table: kept whole
            (with their full history); erase again to remove them.
        langgraph: Whether LangGraph checkpoints and store items were erased
            (only for a whole tenant: their rows carry no narrower scope).
            The store's namespace indexes go with them (counted under
            ``removed["namespace_indexes"]``); the check reads index
            definitions too (``remaining["namespace_indexes"]``).
        working_memory: Where working memory was erased (and checked).
        checked: What the check looked at, one sentence each.
        kept: What still identifies the erased scope, per column, and why.
        vacuum: Per table, ``"vacuumed"``, ``"vacuumed (full)"`` or why it
            was skipped; empty unless ``vacuum`` was asked for.
    """

    scope: Scope
    include: str
    removed: dict[str, int] = field(default_factory=dict)
    started: datetime = field(default_factory=lambda: datetime.now(UTC))
    finished: datetime | None = None
    verified: bool = False
    remaining: dict[str, int] = field(default_factory=dict)
    written_during: dict[str, int] = field(default_factory=dict)
    langgraph: bool = False
    working_memory: str = ""
    checked: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)
    vacuum: dict[str, str] = field(default_factory=dict)

    def add(self, table: str, count: int) -> None:
        """Count ``count`` more rows removed from ``table``."""
        self.removed[table] = self.removed.get(table, 0) + int(count)
