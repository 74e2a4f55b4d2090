"""What ``memsvc demo`` does: a short tour of the API on a real database."""

from __future__ import annotations

import time
from collections.abc import Callable

from memsvc.core.models import SearchHit
from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.embedding import embedder_from_spec
from memsvc.service import MemoryService

FACTS = [
    ("the user prefers metric units", {"kind": "preference"}, 0.9),
    ("the user's timezone is Europe/Lisbon", {"kind": "preference"}, 0.7),
    ("the bridge span table was checked on Monday", {"kind": "event"}, 0.4),
    ("deploys happen on Tuesdays after the standup", {"kind": "fact"}, 0.5),
    ("the load calculation uses Eurocode 1", {"kind": "fact"}, 0.8),
    ("ticket BR-1142: the deck joint detail was revised after review", {"kind": "event"}, 0.6),
]
# The demo's search: a question about a ticket, as users ask it.
IDENTIFIER = "BR-1142"
QUESTION = f"what changed in the bridge deck with {IDENTIFIER}?"


async def run_demo(settings: Settings, say: Callable[[str], None]) -> None:
    """Run the tour, printing each step with ``say``."""
    where = "the embedded PostgreSQL" if settings.uses_embedded_database else "MEMSVC_DATABASE_URL"
    say(f"opening memsvc on {where} (data dir {settings.data_dir}) ...")
    started = time.perf_counter()
    embedder = embedder_from_spec(settings.embedder, settings.embedding_dim)
    async with MemoryService.open(settings, embedder=embedder) as svc:
        say(f"  ready in {time.perf_counter() - started:.1f}s, schema {settings.db_schema!r}")
        scope = Scope(tenant="demo", project="bridge", agent="planner", session="s-42")

        say("\nlong-term memories")
        stored = await svc.memories.add_many(
            scope,
            [{"content": c, "metadata": m, "importance": i} for c, m, i in FACTS],
        )
        for memory in stored:
            say(f"  stored {memory.id}  {memory.content!r}")
        again = await svc.memories.add(scope, FACTS[0][0])
        say(f"  adding the first fact again returns the same memory: {again.id == stored[0].id}")
        await svc.memories.put(scope, "units", "metric")
        keyed = await svc.memories.put(scope, "units", "SI, with kN for loads")
        say(f"  keyed memory 'units' = {keyed.content!r} (version {keyed.version})")
        say(f"  memories in the session: {await svc.memories.count(scope)}")

        for line in await _search_tour(svc, scope):
            say(line)
        say("search with where={'kind': 'fact'} and rank='recall'")
        hits = await svc.memories.search(
            scope, "how are loads calculated", k=2, where={"kind": "fact"}, rank="recall"
        )
        for hit in hits:
            say(f"  {hit.score:.3f}  {hit.memory.content}")
        history = await svc.memories.history(keyed.id)
        say(f"history of 'units': {[f'{e.kind} v{e.version}' for e in history]}")
        for line in await _optional_tour(svc, scope, [m.id for m in stored]):
            say(line)
    say("\ndone; run it again and the memories are still there (deduplicated).")


def _arms(hit: SearchHit) -> str:
    ranks = [
        f"{arm} arm #{rank}"
        for arm, rank in (("vector", hit.vector_rank), ("text", hit.text_rank))
        if rank is not None
    ]
    return ", ".join(ranks)


async def _search_tour(svc: MemoryService, scope: Scope) -> list[str]:
    """What each arm of a hybrid search finds for one question, then their fusion."""
    memories = svc.memories
    lines = [f"\nsearch {QUESTION!r}, k=3: each arm on its own, then both fused (hybrid)"]
    by_meaning = await memories.search(scope, QUESTION, k=3, mode="vector")
    lines.append("  vector arm (mode='vector'): the memories nearest to the question's embedding")
    lines += [f"    {h.score:.3f}  {h.memory.content}" for h in by_meaning]
    by_words = await memories.search(scope, IDENTIFIER, k=3, mode="text")
    lines.append(
        f"  text arm (mode='text' on {IDENTIFIER!r}): hybrid requires the question's "
        "identifiers and ranks matches by its other words"
    )
    lines += [f"    {h.score:.3f}  {h.memory.content}" for h in by_words]
    every_word = await memories.search(scope, QUESTION, k=3, mode="text")
    lines.append(
        f"  (text mode on the whole question requires every word: {len(every_word)} found)"
    )
    fused = await memories.search(scope, QUESTION, k=3)  # hybrid: the service has an embedder
    lines.append(
        "  hybrid (the default for text when there is an embedder): both arms fused by "
        "reciprocal rank; a memory holding the identifier ranks above those only the "
        "vector arm found"
    )
    lines += [f"    {h.score:.4f}  {h.memory.content}  ({_arms(h)})" for h in fused]
    return lines


async def _optional_tour(svc: MemoryService, scope: Scope, ids: list) -> list[str]:  # type: ignore[type-arg]
    """Assemblies, checkpoints and working memory, where this build has them."""
    lines: list[str] = []
    assemblies = svc.assemblies
    if hasattr(assemblies, "create"):
        existing = None
        try:
            existing = await assemblies.get_by_name(scope, "user preferences")
        except Exception:
            existing = None
        group = existing or await assemblies.create(
            scope, "user preferences", memory_ids=ids[:2], description="what the user likes"
        )
        lines.append(
            f"\nassembly {group.name!r}: {group.member_count} members, "
            f"centroid of {len(group.centroid or [])} dims"
        )
    working = getattr(svc, "working", None)
    if working is not None:
        wm = working(scope)
        await wm.set("draft", {"step": 1}, ttl_seconds=600)
        await wm.append_scratchpad("checked the span table")
        checkpoint_id = await wm.create_checkpoint("before edit")
        await wm.set("draft", {"step": 2})
        await wm.restore_checkpoint(checkpoint_id)
        lines.append(
            f"\nworking memory ({type(svc.working_store).__name__}): "
            f"draft={await wm.get('draft')}, scratchpad={await wm.get_scratchpad()}"
        )
        lines.append(f"  checkpoint {checkpoint_id} stored in PostgreSQL and restored")
    return lines
