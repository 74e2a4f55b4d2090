"""``svc.remember``: from conversation messages to memories, each message applied once.

For each batch of new messages (those the scope's ledger does not hold):

1. the extractor lists the facts they state;
2. each fact is searched in the scope (:mod:`memsvc.remember.candidates`), and
   the extractor, shown the related memories under handles, answers with
   operations, checked strictly (:mod:`memsvc.extraction.answers`);
3. in one transaction: the batch's message ids go into the ledger (a message
   another call already applied there makes this batch start over with the
   rest), the memories the operations name are locked and must still be at
   the version shown (else the extractor is asked once more with fresh
   candidates, then :class:`~memsvc.core.errors.ConflictError`), and the
   operations are applied (:mod:`memsvc.remember.apply`), each memory
   recording its provenance.

A crash before the commit leaves nothing (the ledger rows go with it, so a
retry asks again); after it, a retry finds every message in the ledger and
applies nothing twice. An answer refused as a whole leaves its messages out
of the ledger (``pending``), so calling again asks again.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from memsvc.core.errors import ConflictError, ValidationError
from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.core.validation import validate_limit, validate_scope
from memsvc.db.replicas import ReadRouter
from memsvc.db.repository import Repository
from memsvc.db.sql import Params, scope_condition
from memsvc.extraction.answers import CheckedOperations, Limits, check_facts, check_operations
from memsvc.extraction.messages import Message, normalize_messages
from memsvc.extraction.operations import ADD, SUPERSEDE, UPDATE, Rejected
from memsvc.extraction.protocols import ExtractionRequest, Extractor
from memsvc.extraction.specs import extractor_from_spec
from memsvc.memories.embedding_space import EmbeddingSpace
from memsvc.memories.repository import MemoryRepository
from memsvc.remember import candidates
from memsvc.remember import queries as q
from memsvc.remember.apply import SUPPORTED, BatchApplier, Provenance, StoreRefused
from memsvc.remember.candidates import CandidateSet, embed_facts, find_candidates
from memsvc.remember.result import Applied, RememberResult

MAX_K_CANDIDATES = 100
# One extractor call reads at most this many messages, and about this much text.
BATCH_MESSAGES = 20
BATCH_CHARS = 48_000


class _Stale(Exception):
    """A memory shown to the extractor changed before the batch could apply."""


class _AlreadyApplied(Exception):
    """A concurrent call committed some of the batch's messages first."""


@dataclass
class _Outcome:
    """What a call did so far, batch by batch."""

    applied: list[Applied] = field(default_factory=list)
    skipped: list[Rejected] = field(default_factory=list)
    remembered: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    model_calls: int = 0

    def result(self) -> RememberResult:
        return RememberResult(
            tuple(self.applied), tuple(self.skipped), tuple(self.remembered),
            tuple(self.already), tuple(self.pending), self.model_calls,
        )


def batches(messages: Sequence[Message]) -> list[list[Message]]:
    """``messages`` in order, cut into batches one extractor call reads."""
    found: list[list[Message]] = []
    current: list[Message] = []
    size = 0
    for message in messages:
        full = len(current) >= BATCH_MESSAGES or size + len(message.content) > BATCH_CHARS
        if current and full:
            found.append(current)
            current, size = [], 0
        current.append(message)
        size += len(message.content)
    if current:
        found.append(current)
    return found


class Remembering(Repository):
    """Runs ``svc.remember`` on the service's pool and memory repository.

    Args:
        extractor: The default extractor (None: the one ``settings.extractor``
            names, built at first use).
        limits: How much one extractor answer may hold.
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: Settings,
        *,
        memories: MemoryRepository,
        space: EmbeddingSpace | None = None,
        extractor: Extractor | None = None,
        reads: ReadRouter | None = None,
        limits: Limits | None = None,
    ) -> None:
        super().__init__(pool, settings, reads=reads)
        self._memories = memories
        self._space = space
        self._extractor = extractor
        self._from_settings: Extractor | None = None
        self.limits = limits or Limits(max_content_chars=min(2000, settings.max_content_bytes))

    def default_extractor(self) -> Extractor | None:
        """The extractor used when a call names none (``MEMSVC_EXTRACTOR`` if not given)."""
        if self._extractor is not None:
            return self._extractor
        if self._from_settings is None and self._settings.extractor:
            self._from_settings = extractor_from_spec(self._settings.extractor)
        return self._from_settings

    async def remember(
        self,
        scope: Scope,
        messages: Sequence[Any],
        *,
        extractor: Extractor | None = None,
        k_candidates: int = 10,
    ) -> RememberResult:
        """Remember what ``messages`` state into ``scope``; see the module docstring."""
        scope = validate_scope(scope)
        k = validate_limit(k_candidates, "k_candidates", MAX_K_CANDIDATES)
        checked = normalize_messages(messages, self._settings.max_content_bytes)
        chosen = extractor if extractor is not None else self.default_extractor()
        if chosen is None:
            raise ValidationError(
                "extractor",
                "no extractor: pass extractor=, open the service with one, or set MEMSVC_EXTRACTOR",
            )
        if not isinstance(chosen, Extractor):
            raise ValidationError("extractor", "must have name, version, model, facts, operations")
        outcome = _Outcome()
        for batch in batches(checked):
            await self._batch(scope, batch, chosen, k, outcome)
        return outcome.result()

    # ------------------------------------------------------------ one batch

    async def _batch(
        self, scope: Scope, batch: list[Message], extractor: Extractor, k: int, out: _Outcome
    ) -> None:
        while True:
            pending, small_scope = await self._not_yet_remembered(scope, batch, out)
            if not pending:
                return
            try:
                await self._extract_and_apply(scope, pending, extractor, k, small_scope, out)
            except _AlreadyApplied:
                # Another call committed some of these messages first; the
                # rest (fewer each time round) are asked about again.
                continue
            return

    async def _not_yet_remembered(
        self, scope: Scope, batch: list[Message], out: _Outcome
    ) -> tuple[list[Message], bool]:
        """The batch's messages the scope's ledger lacks, and whether the scope is small."""
        params = Params()
        scope_sql = scope_condition(scope, "exact", params)
        most = candidates.SHARED_SCAN_MAX_ROWS
        sql = q.remembered_and_held(
            self._schema, scope_sql, params.add([m.id for m in batch]), most
        )
        row = await self._read(
            None, lambda conn: conn.fetchrow(sql, *params.values), tenant=scope.tenant, routed=False
        )
        done = set(row["remembered"])
        out.already.extend(m.id for m in batch if m.id in done and m.id not in out.already)
        return [m for m in batch if m.id not in done], row["held"] <= most

    async def _extract_and_apply(
        self,
        scope: Scope,
        pending: list[Message],
        extractor: Extractor,
        k: int,
        small_scope: bool,
        out: _Outcome,
    ) -> None:
        ids = [m.id for m in pending]
        out.model_calls += 1
        facts = check_facts(await extractor.facts(pending), self.limits)
        out.skipped.extend(facts.rejected)
        if facts.unusable or (facts.rejected and not facts.facts):
            out.pending.extend(ids)
            return
        vectors = await embed_facts(self._space, facts.facts)
        allowed = SUPPORTED
        for asking in range(2):
            shown = CandidateSet()
            answer = CheckedOperations(())
            if facts.facts:
                async with self._connection(tenant=scope.tenant, writes=False) as conn:
                    shown = await find_candidates(
                        self._memories, self._settings, scope, facts.facts, vectors, k, conn,
                        small_scope=small_scope,
                    )
                request = ExtractionRequest(
                    tuple(pending), shown.facts, shown.candidates,
                    self.limits.max_operations, allowed,
                )
                out.model_calls += 1
                answer = check_operations(
                    await extractor.operations(request),
                    shown=shown.by_ref.keys(), limits=self.limits, supported=allowed,
                )
                if answer.unusable or (answer.rejected and not answer.accepted):
                    out.skipped.extend(answer.rejected)
                    out.pending.extend(ids)
                    return
            provenance = Provenance(tuple(ids), extractor.name, extractor.version, extractor.model)
            try:
                applied, refused = await self._apply(scope, ids, answer, shown, provenance)
            except _Stale as exc:
                if asking == 0:
                    continue
                raise ConflictError(
                    "the memories shown to the extractor changed again while it answered "
                    f"({exc}); nothing of this batch was applied: call remember again"
                ) from exc
            out.applied.extend(applied)
            out.skipped.extend([*answer.rejected, *refused])
            out.remembered.extend(ids)
            return

    async def _apply(
        self,
        scope: Scope,
        ids: list[str],
        answer: CheckedOperations,
        shown: CandidateSet,
        provenance: Provenance,
    ) -> tuple[list[Applied], list[Rejected]]:
        """The batch's transaction: ledger, candidates' locks, operations."""
        embeddings = await self._embeddings(answer)
        refs = {
            ref for _, op in answer.accepted if (ref := getattr(op, "ref", None)) in shown.by_ref
        }
        expected = {shown.by_ref[ref].memory_id: shown.by_ref[ref].version for ref in refs}
        batch_id = uuid.uuid4()
        label = f"{provenance.extractor}/{provenance.extractor_version}"

        async def attempt(isolated: bool) -> tuple[list[Applied], list[Rejected]]:
            async with self._transaction(tenant=scope.tenant) as conn:
                recorded = await conn.fetch(
                    q.record(self._schema), *scope.levels, ids, batch_id, label, provenance.model
                )
                if len(recorded) != len(ids):
                    raise _AlreadyApplied
                await self._check_versions(conn, scope, expected)
                applier = BatchApplier(
                    conn, self._memories, scope, shown.by_ref, provenance, embeddings,
                    answer.created,
                )
                return await applier.apply(answer.accepted, isolated=isolated)

        # Every operation at once; only when the store refuses one, the batch
        # again with each operation in a savepoint (two more round trips each).
        try:
            return await self._retrying(lambda: attempt(False), owns_transaction=True)
        except StoreRefused:
            return await self._retrying(lambda: attempt(True), owns_transaction=True)

    async def _check_versions(
        self, conn: asyncpg.Connection, scope: Scope, expected: dict[uuid.UUID, int]
    ) -> None:
        """Lock the memories the operations name; each must be as it was shown."""
        if not expected:
            return
        params = Params()
        scope_sql = scope_condition(scope, "exact", params)
        sql = q.lock_candidates(self._schema, scope_sql, params.add(list(expected)))
        found = {row["id"]: row["version"] for row in await conn.fetch(sql, *params.values)}
        for memory_id, version in expected.items():
            if memory_id not in found:
                raise _Stale(f"memory {memory_id} is gone")
            if found[memory_id] != version:
                raise _Stale(
                    f"memory {memory_id} is at version {found[memory_id]}, shown at {version}"
                )

    async def _embeddings(self, answer: CheckedOperations) -> dict[str, Any]:
        """The new contents' embeddings, computed before the transaction opens (one call)."""
        space = self._space
        if space is None or space.embedder is None or space.migrating:
            return {}  # the store embeds them itself (or has no embedder)
        texts = list(
            dict.fromkeys(
                op.content for _, op in answer.accepted if isinstance(op, ADD | UPDATE | SUPERSEDE)
            )
        )
        if not texts:
            return {}
        return dict(zip(texts, await space.embed(texts, "content"), strict=True))
