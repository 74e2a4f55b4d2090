"""The memories shown to the extractor are each fact's hybrid search in the exact scope.

``remember`` searches a batch's facts in one statement, by one of three
paths (see :mod:`memsvc.remember.candidates`): a small scope's rows read once
for every fact, a bigger scope fact by fact, and a scope with an HNSW index
of its own through that index. Each is held to what ``svc.memories.search``
returns for the fact (hybrid, exact scope, valid now).
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from memsvc import MemoryService, Scope
from memsvc.embedding import HashingEmbedder
from memsvc.extraction import NOOP, ExtractionRequest, Message
from memsvc.memories.search_plan import SearchPlan
from memsvc.remember import candidates
from memsvc.testing.postgres import settings_for_tests

SCOPE = Scope("acme", "bridge", "planner", "s-1")
FACTS = [
    "The user lives in Berlin.",
    "The user works as a nurse at the city hospital.",
    "The user's sister is called Anna.",
    "The user prefers tea over coffee in the morning.",
]
WORDS = (
    "lives works sister tea coffee hospital city morning garden river piano winter "
    "bicycle kitchen museum harbour letter window forest market violin island "
    "theatre bakery mountain lantern library orchard"
).split()


class RecordingExtractor:
    """States ``FACTS``, records what it is shown, and changes nothing."""

    name = "recording"
    version = "1"
    model: str | None = None

    def __init__(self) -> None:
        self.requests: list[ExtractionRequest] = []

    async def facts(self, messages: Sequence[Message]) -> object:
        return {"facts": FACTS}

    async def operations(self, request: ExtractionRequest) -> object:
        self.requests.append(request)
        return [NOOP()]


@pytest.fixture
async def svc(memsvc_database_url: str) -> AsyncIterator[MemoryService]:
    # Scopes of 100 live vectors get an index of their own (when asked to).
    settings = settings_for_tests(memsvc_database_url, scope_index_from=100)
    embedder = HashingEmbedder(settings.embedding_dim)
    async with MemoryService.open(settings, embedder=embedder) as service:
        yield service


async def fill(svc: MemoryService) -> None:
    """The scope's memories, ones that must never be shown, and neighbours' memories."""
    picks = random.Random(7)
    items = [{"content": f"Note {n}: {' '.join(picks.sample(WORDS, 4))}."} for n in range(150)]
    await svc.memories.add_many(SCOPE, items)
    old = await svc.memories.add(SCOPE, "The user lives in Paris.")
    await svc.memories.supersede(old.id, "The user lives in Lyon.")
    an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
    ended = await svc.memories.add(SCOPE, "The user works as a baker.", valid_from=an_hour_ago)
    await svc.memories.invalidate(ended.id, at=datetime.now(UTC) - timedelta(seconds=1))
    later = datetime(2999, 1, 1, tzinfo=UTC)
    await svc.memories.add(SCOPE, "The user will live in Rome.", valid_from=later)
    for elsewhere in (Scope("acme", "bridge", "planner", "s-2"), Scope("acme", "bridge")):
        await svc.memories.add(elsewhere, "The user lives in Berlin, says another session.")


async def shown(svc: MemoryService) -> list[tuple[str, list[str]]]:
    """Per fact: its text and the contents shown to the extractor for it, best first."""
    extractor = RecordingExtractor()
    # A new message each call: one the scope remembered would not be asked about.
    messages = [{"id": str(uuid.uuid4()), "role": "user", "content": " ".join(FACTS)}]
    await svc.remember(SCOPE, messages, extractor=extractor, k_candidates=10)
    (request,) = extractor.requests
    content = {candidate.ref: candidate.content for candidate in request.candidates}
    return [(fact.text, [content[ref] for ref in fact.refs]) for fact in request.facts]


async def searched(
    svc: MemoryService, facts: list[tuple[str, list[str]]], plan: SearchPlan = "exact"
) -> list[tuple[str, list[str]]]:
    """The same facts with what a hybrid search of each finds in the exact scope."""
    found = []
    for text, _ in facts:
        hits = await svc.memories.search(
            SCOPE, text, k=10, include="exact", mode="hybrid", plan=plan
        )
        found.append((text, [hit.memory.content for hit in hits]))
    return found


async def index_scans(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        scans = await conn.fetchval(
            "SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_indexes "
            "WHERE indexrelname LIKE 'ix_memories_scope_%'"
        )
    finally:
        await conn.close()
    return int(scans)


async def test_a_small_scope_read_once_shows_each_fact_its_search(svc: MemoryService) -> None:
    await fill(svc)
    facts = await shown(svc)
    assert facts == await searched(svc, facts)
    assert [text for text, _ in facts] == FACTS
    for _, contents in facts:
        assert len(contents) == 10
        assert "The user lives in Paris." not in contents
        assert "The user works as a baker." not in contents
        assert "The user will live in Rome." not in contents
        assert not any("another session" in content for content in contents)


async def test_a_bigger_scope_searched_fact_by_fact_shows_the_same(
    svc: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    await fill(svc)
    read_once = await shown(svc)
    monkeypatch.setattr(candidates, "SHARED_SCAN_MAX_ROWS", 10)
    fact_by_fact = await shown(svc)
    assert fact_by_fact == read_once == await searched(svc, read_once)


async def test_a_scope_with_its_own_index_is_searched_through_it(
    svc: MemoryService, memsvc_database_url: str
) -> None:
    await fill(svc)
    report = await svc.maintenance.index_scopes()
    assert report.built == [SCOPE], report
    before = await index_scans(memsvc_database_url)
    facts = await shown(svc)
    # Statistics reach other sessions within seconds of the scan.
    for _ in range(150):
        if await index_scans(memsvc_database_url) > before:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("remember's candidate search never used the scope's own index")
    # What a search of each fact finds walking the same index.
    assert facts == await searched(svc, facts, plan="auto")
