"""``--pipeline``: the history fed through ``svc.remember`` by a perfect extractor.

    python -m benchmarks.memory_quality --pipeline --people 10 --sessions 40

The history stream's sessions become conversations: each session's messages
(id, role, text, time) go to ``svc.remember`` in one call. The extractor is
``OpenAIChatExtractor`` talking to a scripted local chat completions server
that answers as the answer key does (``AnswerKey``): the facts a batch's
messages state are the memories the key writes for them, and the operations
ADD each one with the key's metadata, SUPERSEDE the memory it replaces (when
that memory is among the candidates memsvc showed, and this memsvc has valid
time) and INVALIDATE the memories it ends. The same operations are also
written directly, one call each (``Extractor`` with no batching), into
another scope, session by session in turn with the pipeline.

Reported: accuracy of both scopes on the history's questions (the pipeline
must add no loss), rows and operations, what the pipeline could not do
(a replaced memory not shown among the candidates), ``remember``'s
throughput with the time spent in the extractor (HTTP and the scripted
model) left out, against the direct writes', and model calls per message.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np

from benchmarks.memory_quality.extractor import Capabilities, Extractor, Store, metadata
from benchmarks.memory_quality.model import Add, Dataset, Invalidate, Message, Operation
from benchmarks.memory_quality.scoring import Strategy, evaluate
from benchmarks.retrieval.dataset import embed_cached
from benchmarks.scratch import scratch_dir
from memsvc import MemoryService, OpenAIChatExtractor, Scope, Settings
from memsvc.extraction import ExtractionRequest
from memsvc.extraction import Message as SentMessage
from tests.extraction.fake_chat import add, facts, invalidate, operations, serving, supersede

TENANT = "bench-pipeline"
STREAM = "history"
KINDS = ("current", "past", "paraphrase")


def _moment(text: str) -> datetime:
    return datetime.fromisoformat(text)


class AnswerKey:
    """Answers the chat server's requests as the dataset's ground truth does.

    Facts: each memory the key writes for the batch's messages, and, for a
    memory it replaces or ends, that memory's own text too (a lookup: it
    makes the search show the memory, as "Ana no longer lives in Paris"
    would). Operations: ADD, or SUPERSEDE the first replaced memory still
    valid and shown (INVALIDATE the others), or INVALIDATE what an
    Invalidate ends; each memory acted on once. A memory an earlier ADD of
    the same answer writes is named ``newN`` (the answer's Nth ADD).
    """

    def __init__(self, data: Dataset, stream: str) -> None:
        self.by_message: dict[tuple[str, datetime], list[Message]] = {}
        self.content: dict[str, str] = {}  # memory key -> its text
        self.adds: dict[str, Add] = {}  # fact text -> the Add stating it
        self.ends: dict[str, Invalidate] = {}  # fact text -> the Invalidate it stands for
        self.ended: set[str] = set()  # memory keys the key has ended so far
        for session in data.streams[stream]:
            for message in session.messages:
                key = (message.text, _moment(message.at))
                self.by_message.setdefault(key, []).append(message)
                for op in message.ops:
                    if isinstance(op, Add):
                        self.content[op.memory] = op.content
        self.not_shown = 0  # replaced or ended memories (still valid) not among the candidates
        self.same_batch = 0  # ... written by the same batch (not stored when it is asked)
        self.batch: set[str] = set()  # memory keys the current batch writes
        self.written: dict[str, str] = {}
        self.operations: Counter[str] = Counter()

    def _ops(self, payload: dict[str, Any]) -> list[Operation]:
        found: list[Operation] = []
        for sent in payload["messages"]:
            for message in self.by_message.get((sent["content"], _moment(sent["at"])), [])[:1]:
                found.extend(message.ops)
        return found

    def _open(self, keys: list[str]) -> list[str]:
        """The keys not ended yet (the key's own state), each once."""
        return [k for k in dict.fromkeys(keys) if k in self.content and k not in self.ended]

    def __call__(self, step: str, payload: dict[str, Any]) -> Any:
        if step == "facts":
            stated: list[str] = []
            ops = self._ops(payload)
            self.batch = {op.memory for op in ops if isinstance(op, Add)}
            for op in ops:
                if isinstance(op, Add):
                    self.adds[op.content] = op
                    stated.append(op.content)
                    ending = op.supersedes
                else:
                    ending = op.memories
                    if self._open(ending):
                        self.ends[self.content[self._open(ending)[0]]] = op
                stated.extend(self.content[k] for k in self._open(ending))
            return facts(*dict.fromkeys(stated))
        if step == "operations":
            return operations(*self._decide(payload))
        raise AssertionError(f"no answer for {step!r}")

    def _decide(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        shown = {m["content"]: m["ref"] for m in payload["memories"]}
        allowed = set(payload["allowed"])
        used: set[str] = set()  # one operation per memory in an answer
        self.written: dict[str, str] = {}  # memory key -> "newN" of this answer's ADD of it
        decided: list[dict[str, Any]] = []
        for item in payload["facts"]:
            text = item["fact"]
            op = self.adds.pop(text, None)
            if op is not None:
                decided.extend(self._write(op, shown, allowed, used))
            elif (ended := self.ends.pop(text, None)) is not None and "INVALIDATE" in allowed:
                decided.extend(self._end(ended.memories, ended.at, shown, used))
        self.operations.update(d["op"] for d in decided)
        return decided

    def _targets(self, keys: list[str], shown: dict[str, str], used: set[str]) -> list[str]:
        """The refs of the still-valid memories ``keys`` names, shown and not yet acted on."""
        refs = []
        for key in self._open(keys):
            ref = shown.get(self.content[key]) or self.written.get(key)
            self.ended.add(key)
            if ref is None and key in self.batch:
                self.same_batch += 1
            elif ref is None:
                self.not_shown += 1
            elif ref not in used:
                used.add(ref)
                refs.append(ref)
        return refs

    def _write(
        self, op: Add, shown: dict[str, str], allowed: set[str], used: set[str]
    ) -> list[dict[str, Any]]:
        meta = metadata(op)
        refs = self._targets(op.supersedes, shown, used) if "SUPERSEDE" in allowed else []
        if not refs:
            # Later operations of this answer name this memory "newN".
            self.written[op.memory] = f"new{len(self.written) + 1}"
            return [add(op.content, metadata=meta, valid_from=op.valid_from)]
        first = supersede(refs[0], op.content, valid_from=op.valid_from)
        first["metadata"] = meta
        return [first, *(invalidate(ref, op.valid_from) for ref in refs[1:])]

    def _end(
        self, keys: list[str], at: str, shown: dict[str, str], used: set[str]
    ) -> list[dict[str, Any]]:
        return [invalidate(ref, at) for ref in self._targets(keys, shown, used)]


class TimedExtractor:
    """An extractor, with the time spent waiting for it (HTTP and model) added up."""

    def __init__(self, inner: OpenAIChatExtractor) -> None:
        self.inner = inner
        self.name, self.version, self.model = inner.name, inner.version, inner.model
        self.waited = 0.0

    async def facts(self, messages: Sequence[SentMessage]) -> object:
        started = time.perf_counter()
        try:
            return await self.inner.facts(messages)
        finally:
            self.waited += time.perf_counter() - started

    async def operations(self, request: ExtractionRequest) -> object:
        started = time.perf_counter()
        try:
            return await self.inner.operations(request)
        finally:
            self.waited += time.perf_counter() - started


class OneCallEach(Extractor):
    """The answer key written directly, one call per operation, as remember writes them."""

    async def apply(
        self, scope: Scope, ops: Sequence[Operation], vectors: dict[str, np.ndarray]
    ) -> None:
        for op in ops:
            if isinstance(op, Add):
                await self.write_one(scope, op, vectors[op.memory])
            elif self.store.supersession:
                await self.end(op)


class LookupEmbedder:
    """The benchmark's cached all-MiniLM-L6-v2 vectors by text (new texts embedded and cached)."""

    def __init__(self, by_text: dict[str, np.ndarray], cache_dir: Any) -> None:
        self.by_text = by_text
        self.cache_dir = cache_dir

    async def __call__(self, texts: Sequence[str]) -> list[np.ndarray]:
        missing = [t for t in dict.fromkeys(texts) if t not in self.by_text]
        if missing:
            self.by_text.update(zip(missing, embed_cached(missing, self.cache_dir), strict=True))
        return [self.by_text[t] for t in texts]


def conversations(data: Dataset) -> list[list[dict[str, Any]]]:
    """Each session of the stream as the messages ``remember`` takes."""
    return [
        [{"id": m.id, "role": m.role, "content": m.text, "at": m.at} for m in session.messages]
        for session in data.streams[STREAM]
    ]


async def rows_in(svc: MemoryService, scope: Scope) -> int:
    async with svc.pool.acquire() as conn:
        count = await conn.fetchval(
            f"SELECT count(*) FROM {svc.settings.db_schema}.memories "
            "WHERE tenant_id = $1 AND project_id = $2",
            scope.tenant, scope.project,
        )
    return int(count)


async def one_run(
    svc: MemoryService, data: Dataset, vectors: dict[str, np.ndarray], run: int
) -> dict[str, Any]:
    """Both ways into scopes of their own, interleaved session by session.

    Each session's operations are written directly, and its messages
    remembered, one right after the other (which goes first alternates), so
    both ways meet the same machine and the same table as it grows: timing
    one way wholly before the other let the machine's drift decide the ratio.
    """
    caps = Capabilities.of(svc)
    store = Store("supersession", supersession=True) if caps.supersession else Store("plain")
    sessions = data.streams[STREAM]
    direct, piped = Scope(TENANT, f"direct-{run}"), Scope(TENANT, f"pipeline-{run}")
    key = AnswerKey(data, STREAM)
    talks = conversations(data)
    writer = OneCallEach(svc, caps, store)
    direct_s = remember_s = 0.0
    calls = 0
    skipped: Counter[str] = Counter()
    with serving(answerer=key) as chat:
        extractor = TimedExtractor(OpenAIChatExtractor(chat.base_url, "answer-key"))
        for n, (session, talk) in enumerate(zip(sessions, talks, strict=True)):
            ops = [op for m in session.messages for op in m.ops]
            for way in ("direct", "remember") if (n + run) % 2 == 0 else ("remember", "direct"):
                started = time.perf_counter()
                if way == "direct":
                    await writer.apply(direct, ops, vectors)
                    direct_s += time.perf_counter() - started
                else:
                    result = await svc.remember(piped, talk, extractor=extractor)
                    remember_s += time.perf_counter() - started
                    calls += result.model_calls
                    skipped.update(r.reason.split(":")[0] for r in result.skipped)
    operations = sum(len(m.ops) for session in sessions for m in session.messages)
    return {
        "store": store.name,
        "operations": operations,
        "sessions": len(talks),
        "messages": sum(len(t) for t in talks),
        "direct_s": direct_s,
        "pipeline_s": remember_s,
        "extractor_s": extractor.waited,
        "pipeline_without_model_s": remember_s - extractor.waited,
        "model_calls": calls,
        "skipped": skipped,
        "applied": dict(key.operations),
        "not_shown": key.not_shown,
        "same_batch": key.same_batch,
        "scopes": (direct, piped),
        "rows": (await rows_in(svc, direct), await rows_in(svc, piped)),
    }


async def accuracy(
    svc: MemoryService, data: Dataset, vectors: dict[str, np.ndarray], scope: Scope, store: str
) -> dict[str, Any]:
    questions = [q for q in data.questions if q.stream == STREAM]
    strategy = Strategy(store, store, "vector", store == "supersession")
    scopes = {STREAM: scope}
    return {
        lens: await evaluate(svc.memories, scopes, questions, vectors, strategy, None, lens)
        for lens in ("asked", "slot")
    }


async def run(args: argparse.Namespace, data: Dataset, vectors: dict[str, np.ndarray]) -> None:
    if args.database_url:
        settings = Settings(database_url=args.database_url, auto_migrate=True, pool_max_size=4)
    else:
        settings = Settings(
            data_dir=scratch_dir("memsvc-pipeline-"), auto_migrate=True, pool_max_size=4
        )
    by_text: dict[str, np.ndarray] = {}
    for stream in data.streams:
        for _message, op in data.adds(stream):
            by_text[op.content] = vectors[op.memory]
    for question in data.questions:
        by_text[question.text] = vectors[question.id]
    embedder = LookupEmbedder(by_text, args.cache_dir)
    async with MemoryService.open(settings, embedder=embedder) as svc:
        runs = []
        quality: dict[str, Any] = {}
        for n in range(args.pipeline_runs):
            # Each run on an empty tenant: searches cost what they cost at this size.
            await clear(svc)
            runs.append(await one_run(svc, data, vectors, n))
            if n == 0:
                direct, piped = runs[0]["scopes"]
                quality["direct"] = await accuracy(svc, data, vectors, direct, runs[0]["store"])
                quality["pipeline"] = await accuracy(svc, data, vectors, piped, runs[0]["store"])
        await clear(svc)
    report(runs[0], runs, quality)


async def clear(svc: MemoryService) -> None:
    schema = svc.settings.db_schema
    async with svc.pool.acquire() as conn:
        for table in ("memories", "remembered_messages"):
            await conn.execute(f"DELETE FROM {schema}.{table} WHERE tenant_id = $1", TENANT)
        await conn.execute(f"VACUUM ANALYZE {schema}.memories")


def report(first: dict[str, Any], runs: list[dict[str, Any]], quality: dict[str, Any]) -> None:
    print(
        f"pipeline: {first['messages']:,} messages in {first['sessions']} sessions "
        f"({first['store']} store), {first['operations']:,} answer-key operations"
    )
    print(
        f"  rows: direct {first['rows'][0]:,}, pipeline {first['rows'][1]:,}; "
        f"operations applied {first['applied']}; skipped {dict(first['skipped'])}; "
        f"memories to replace or end the extractor could not name: {first['not_shown']} not "
        f"among the candidates, {first['same_batch']} written by the same batch"
    )
    for lens, title in (("asked", "as asked"), ("slot", "within the slot")):
        cells = []
        for kind in KINDS:
            d = quality["direct"][lens].get(kind, {})
            p = quality["pipeline"][lens].get(kind, {})
            if not d.get("questions"):
                continue
            cells.append(
                f"{kind} top-1 {d['top1']:.3f} / {p['top1']:.3f}, "
                f"top-5 {d['top5']:.3f} / {p['top5']:.3f}"
            )
        print(f"  accuracy {title} (direct / pipeline): " + "; ".join(cells))
    ratios = [r["direct_s"] / r["pipeline_without_model_s"] for r in runs]
    print(
        f"  throughput without the extractor's time, pipeline / direct (per run: "
        f"{', '.join(f'{x:.2f}' for x in ratios)}): median {statistics.median(ratios):.2f}x "
        "(target >= 0.8x)"
    )
    for r in runs:
        print(
            f"    direct {r['operations'] / r['direct_s']:.0f} ops/s; pipeline "
            f"{r['operations'] / r['pipeline_without_model_s']:.0f} ops/s without the "
            f"extractor ({r['pipeline_s']:.1f}s in all, {r['extractor_s']:.1f}s waiting for it)"
        )
    print(
        f"  model calls per message: {first['model_calls'] / first['messages']:.3f} "
        f"({first['model_calls']:,} calls for {first['messages']:,} messages)"
    )
