"""Memory quality benchmark: facts that change, paraphrases and distractors, one run.

    python -m benchmarks.memory_quality                      # 40 people, 160 sessions, 100,000 rows
    python -m benchmarks.memory_quality --rows 10000         # latency among 10,000 rows
    python -m benchmarks.memory_quality --rows 0             # quality only
    python -m benchmarks.memory_quality --write data.json    # the dataset and answer key, then exit
    python -m benchmarks.memory_quality --dedupe-sweep       # cosine-threshold dedup, no database
    python -m benchmarks.memory_quality --pipeline           # the history through svc.remember

Generates a seeded multi-session history (``generator``), embeds every
memory and question with all-MiniLM-L6-v2 (cached outside the project,
``--cache-dir``), writes the streams into memsvc the way a perfect extractor
would (``extractor``), asks the questions and scores the hits (``scoring``):

- current fact ("where does Ana live now?"), past fact ("where did Ana live
  in April 2024?", with ``valid_at`` where the store has validity), and a
  fact said five ways (one answer, not five hits);
- per strategy: plain vector search and hybrid search as today, the
  ceiling (today's store, hits the answer key says were not valid dropped),
  then supersession + ``valid="now"``/``valid_at``, then semantic dedup;
  top-1 and top-5 per kind, rows stored, p50 search latency; each question
  searched as asked, and within its person and slot (``scoring``);
- the duplicate-heavy stream's rows per dedupe mode and the facts lost;
- p50/p99 of searches with and without validity filters in a scope of
  ``--rows`` rows (the history plus other people's histories; past
  ``--filler-embedded`` unique texts, their embeddings are those of embedded
  ones plus noise of 0.02 per dimension, renormalised).

Strategies this memsvc cannot run print "not available in this memsvc":
the runner looks for the valid-time API (``supersedes=``, ``valid_from=``,
``valid=``/``valid_at=``, ``invalidate``, ``dedupe=``) in the signatures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.memory_quality import pipeline, sweep
from benchmarks.memory_quality.extractor import Capabilities, Extractor, Store
from benchmarks.memory_quality.generator import filler, generate
from benchmarks.memory_quality.model import (
    Add,
    Dataset,
    Operation,
    Session,
    problems,
    validity,
)
from benchmarks.memory_quality.scoring import (
    Strategy,
    evaluate,
    latency_sides,
    percentile_ms,
)
from benchmarks.retrieval.dataset import COPY_NOISE, embed_cached
from benchmarks.scratch import scratch_dir
from benchmarks.search_modes import interleaved
from memsvc import MemoryService, Scope, Settings

TENANT = "bench"
DEFAULT_CACHE = Path.home() / ".cache" / "memsvc-bench" / "memory-quality"
UNAVAILABLE = "not available in this memsvc"
KINDS = ("current", "past", "paraphrase")
LENSES = {
    "asked": "questions searched as asked",
    "slot": 'questions searched within their person and slot (where={"about", "slot"})',
}
# Column labels of the question kinds (and of the current questions whose slot changed).
LABELS = {"current": "now", "current, changed": "chg", "past": "past", "paraphrase": "para"}


def stores(caps: Capabilities) -> list[Store]:
    return [
        Store("plain"),
        Store("supersession", supersession=True),
        # With supersession when this memsvc has it, so dedup is judged on top of it.
        Store("semantic", supersession=caps.supersession, dedupe="semantic"),
    ]


def strategies(caps: Capabilities) -> list[Strategy]:
    return [
        Strategy("vector (today)", "plain", "vector", False),
        Strategy("hybrid (today)", "plain", "hybrid", False),
        Strategy("ceiling: key's validity, vector", "plain", "vector", False, oracle=True),
        Strategy("ceiling: key's validity, hybrid", "plain", "hybrid", False, oracle=True),
        Strategy("supersession, vector", "supersession", "vector", True),
        Strategy("supersession, hybrid", "supersession", "hybrid", True),
        Strategy("+ semantic dedup, vector", "semantic", "vector", caps.supersession),
        Strategy("+ semantic dedup, hybrid", "semantic", "hybrid", caps.supersession),
    ]


# Written with the duplicates stream only, for its row counts.
DEDUPE_ONLY = (Store("dedupe off", dedupe="off"), Store("dedupe exact", dedupe="exact"))


def operations(sessions: list[Session]) -> list[Operation]:
    return [op for session in sessions for message in session.messages for op in message.ops]


def embed(data: Dataset, cache_dir: Path) -> dict[str, np.ndarray]:
    """Every memory's and question's embedding, by memory key and question id."""
    adds = [op for stream in data.streams for _message, op in data.adds(stream)]
    texts = [op.content for op in adds] + [q.text for q in data.questions]
    vectors = embed_cached(texts, cache_dir)
    keys = [op.memory for op in adds] + [q.id for q in data.questions]
    return dict(zip(keys, vectors, strict=True))


class QualityBench:
    def __init__(
        self,
        svc: MemoryService,
        data: Dataset,
        vectors: dict[str, np.ndarray],
        args: argparse.Namespace,
    ) -> None:
        self.svc = svc
        self.caps = Capabilities.of(svc)
        self.data = data
        self.vectors = vectors
        self.args = args
        self.results: dict[str, Any] = {
            "dataset": data.describe(),
            "capabilities": vars(self.caps),
        }
        self.loaded: dict[str, dict[str, Any]] = {}
        self.spans = {stream: validity(data, stream) for stream in data.streams}

    async def load(self, store: Store, streams: tuple[str, ...]) -> None:
        missing = store.missing(self.caps)
        if missing:
            print(f"  {store.name:<14} {UNAVAILABLE} (needs {missing})")
            return
        figures: dict[str, Any] = {}
        for stream in streams:
            scope = Scope(TENANT, f"{store.name.replace(' ', '-')}-{stream}")
            extractor = Extractor(self.svc, self.caps, store, self.args.dedupe_threshold)
            started = time.perf_counter()
            await extractor.apply(scope, operations(self.data.streams[stream]), self.vectors)
            rows, facts = await self.stored(scope)
            figures[stream] = {
                "scope": scope.project,
                "rows": rows,
                "facts_with_a_row": facts,
                "wrong_merges": extractor.wrong_merges,
                "load_s": round(time.perf_counter() - started, 2),
            }
        self.loaded[store.name] = figures
        shown = ", ".join(
            f"{stream} {f['rows']:,} rows ({f['load_s']:.1f}s)" for stream, f in figures.items()
        )
        print(f"  {store.name:<14} {shown}")

    async def stored(self, scope: Scope) -> tuple[int, int]:
        """Rows in the scope (whatever their validity), and the distinct facts they state."""
        table = f"{self.svc.settings.db_schema}.memories"
        async with self.svc.pool.acquire() as conn:
            rows = await conn.fetchval(
                f"SELECT count(*) FROM {table} WHERE tenant_id = $1 AND project_id = $2",
                scope.tenant,
                scope.project,
            )
            facts = await conn.fetchval(
                f"SELECT count(DISTINCT metadata->>'fact') FROM {table} "
                "WHERE tenant_id = $1 AND project_id = $2",
                scope.tenant,
                scope.project,
            )
        return int(rows), int(facts)

    async def quality(self) -> None:
        for lens, title in LENSES.items():
            print(title)
            await self.quality_lens(lens)
        print(
            "  (rows: history/duplicates; now: current fact, chg: those whose slot changed; "
            "para: one fact said 5 ways;\n   copies@5: hits stating a paraphrase question's fact)"
        )

    async def quality_lens(self, lens: str) -> None:
        header = " ".join(f"{label + '@1':>7} {label + '@5':>7}" for label in LABELS.values())
        print(f"  {'strategy':<32} {'rows':>12} {header} {'copies@5':>8} {'p50 ms':>7}")
        for strategy in strategies(self.caps):
            loaded = self.loaded.get(strategy.store)
            if loaded is None or (strategy.mode == "hybrid" and not self.caps.hybrid):
                print(f"  {strategy.name:<32} {UNAVAILABLE}")
                continue
            scopes = {stream: Scope(TENANT, f["scope"]) for stream, f in loaded.items()}
            figures = await evaluate(
                self.svc.memories,
                scopes,
                self.data.questions,
                self.vectors,
                strategy,
                self.spans,
                lens,
            )
            figures["rows"] = {stream: f["rows"] for stream, f in loaded.items()}
            self.results.setdefault("strategies", {}).setdefault(lens, {})[strategy.name] = figures
            rows = "/".join(f"{f['rows']:,}" for f in loaded.values())
            cells = " ".join(
                f"{figures[kind]['top1']:>7.3f} {figures[kind]['top5']:>7.3f}" for kind in LABELS
            )
            copies = figures["paraphrase"]["copies_at_5"]
            print(
                f"  {strategy.name:<32} {rows:>12} {cells} {copies:>8.2f} {figures['p50_ms']:>7.2f}"
            )

    def dedupe_table(self) -> None:
        """Rows per dedupe mode, distinct facts kept, and writes merged into another fact."""
        facts = len({q.answer for q in self.data.questions if q.kind == "paraphrase"})
        told = len(self.data.adds("duplicates"))
        print(
            f"duplicate-heavy stream: {facts} distinct facts, each said "
            f"{self.data.sizes['repeats']} ways, among {told:,} memories"
        )
        print(
            f"  {'store':<14} {'rows':>7} {'fewer':>7} {'facts left':>10} {'wrong merges':>12} "
            f"{'not top-5':>9}   history: {'rows':>6} {'wrong merges':>12}"
        )
        baseline = self.loaded.get("dedupe off", self.loaded.get("plain"))
        searched = self.results.get("strategies", {}).get("asked", {})
        table: dict[str, Any] = {}
        for name, strategy in (
            ("plain", "vector (today)"),
            ("dedupe off", ""),
            ("dedupe exact", ""),
            ("semantic", "+ semantic dedup, vector"),
        ):
            figures = self.loaded.get(name, {})
            label = "today" if name == "plain" else name
            if "duplicates" not in figures or baseline is None:
                print(f"  {label:<14} {UNAVAILABLE}")
                continue
            dups = figures["duplicates"]
            fewer = baseline["duplicates"]["rows"] / dups["rows"]
            found = searched.get(strategy, {}).get("paraphrase", {}).get("top5")
            missed = None if found is None else round((1 - found) * facts)
            # "facts left": distinct facts some row still states (a merge can lose one).
            row = {
                "rows": dups["rows"],
                "fewer": round(fewer, 3),
                "facts_left": dups["facts_with_a_row"],
                "wrong_merges": dups["wrong_merges"],
                "not_found_top5": missed,
            }
            line = (
                f"  {label:<14} {dups['rows']:>7,} {fewer:>6.2f}x {row['facts_left']:>10} "
                f"{row['wrong_merges']:>12} {'' if missed is None else missed:>9}"
            )
            if "history" in figures:
                history = figures["history"]
                row["history"] = {k: history[k] for k in ("rows", "wrong_merges")}
                line += f"            {history['rows']:>6,} {history['wrong_merges']:>12}"
            print(line)
            table[label] = row
        print("  (wrong merges: writes answered with a memory stating another fact)")
        self.results["dedupe"] = table

    async def latency(self, rows: int) -> None:
        """The history among other people's, ``rows`` memories in one scope: accuracy and p50."""
        store = (
            Store("supersession", supersession=True) if self.caps.supersession else Store("plain")
        )
        history = operations(self.data.streams["history"])
        told = sum(isinstance(op, Add) for op in history)
        names = [person.name for person in self.data.people]
        # More writes than rows: a text said again is stored once.
        extra = filler_operations(self.data.seed, int(max(0, rows - told) * 1.5), names)
        vectors = dict(self.vectors)
        vectors.update(filler_vectors(extra, self.args.filler_embedded, self.args.cache_dir))
        scope = Scope(TENANT, "latency")
        started = time.perf_counter()
        extractor = Extractor(self.svc, self.caps, store, self.args.dedupe_threshold)
        await extractor.apply(scope, history, vectors)
        stored, _facts = await self.stored(scope)
        while stored < rows and extra:
            # No more writes than rows missing, so the scope never overshoots.
            part, extra = split_after_writes(extra, rows - stored)
            await extractor.apply(scope, part, vectors)
            stored, _facts = await self.stored(scope)
        async with self.svc.pool.acquire() as conn:
            await conn.execute(f"ANALYZE {self.svc.settings.db_schema}.memories")
        print(
            f"  {stored:,} rows in one scope ({store.name} store), "
            f"written in {time.perf_counter() - started:.0f}s; "
            f"{extractor.refused_supersessions} supersessions/invalidations refused by the store"
        )
        questions = [q for q in self.data.questions if q.stream == "history"]
        best = Strategy("at scale", store.name, "vector", store.supersession)
        accuracy = {}
        for lens in LENSES:
            accuracy[lens] = await evaluate(
                self.svc.memories, {"history": scope}, questions, self.vectors, best, None, lens
            )
            shown = ", ".join(
                f"{kind} top-1 {accuracy[lens][kind]['top1']:.3f}" for kind in KINDS[:2]
            )
            validity = " with validity" if best.validity else ""
            print(f"  {best.mode} search{validity}, {lens}: {shown}")
        queries = questions[: self.args.queries]
        sides = latency_sides(self.svc.memories, scope, self.caps.supersession, self.caps.hybrid)

        def by_number(call: Any) -> Callable[[int], Awaitable[Any]]:
            return lambda n: call(queries[n], self.vectors[queries[n].id])

        calls = {name: by_number(call) for name, call in sides.items()}
        spent = await interleaved(calls, len(queries))
        figures: dict[str, Any] = {"rows": stored, "accuracy": accuracy, "sides": {}}
        print(f"  {len(queries)} queries, k=5, sides interleaved")
        for name, values in spent.items():
            p50, p99 = statistics.median(values), percentile_ms(values, 99)
            figures["sides"][name] = {"p50_ms": round(p50, 3), "p99_ms": round(p99, 3)}
            print(f"    {name:<20} p50 {p50:7.2f} ms   p99 {p99:7.2f} ms")
        if not self.caps.supersession:
            print(f"    validity filters: {UNAVAILABLE}")
        self.results["latency"] = figures

    def targets(self) -> None:
        """Each target next to today's figure; top-1 targets judged within the slot.

        Searched as asked, top-1 also depends on the embedder telling a
        person's attributes apart; the ceiling row shows how far a perfect
        validity filter gets there, and is printed beside.
        """
        print("targets")
        strategies = self.results.get("strategies", {})

        def top1(lens: str, strategy: str, kind: str) -> float | None:
            value = strategies.get(lens, {}).get(strategy, {}).get(kind, {}).get("top1")
            return None if value is None else float(value)

        def shown(value: float | None) -> str:
            return "n/a" if value is None else f"{value:.3f}"

        rows: list[tuple[str, float | None, str, str]] = []
        for kind, label in (("current", "valid=now"), ("past", "valid_at")):
            asked = [
                f"{name} {shown(top1('asked', strategy, kind))}"
                for name, strategy in (
                    ("supersession", "supersession, vector"),
                    ("today", "vector (today)"),
                    ("ceiling", "ceiling: key's validity, vector"),
                )
            ]
            rows.append(
                (
                    f"{kind}-fact top-1, supersession + {label}",
                    top1("slot", "supersession, vector", kind),
                    ">= 0.95",
                    f"today {shown(top1('slot', 'vector (today)', kind))}; "
                    f"as asked: {', '.join(asked)}",
                )
            )
        by_name = strategies.get("asked", {})
        dedupe = self.results.get("dedupe", {})
        semantic = dedupe.get("semantic")
        rows.append(
            (
                "duplicates: rows today / with semantic dedup",
                None if semantic is None else semantic["fewer"],
                ">= 3x",
                "",
            )
        )
        found = by_name.get("+ semantic dedup, vector", {}).get("paraphrase", {})
        facts = found.get("questions")
        rows.append(
            (
                "duplicates: facts not found top-5, semantic",
                None if not facts else round((1 - found["top5"]) * facts),
                "0",
                "",
            )
        )
        sides = self.results.get("latency", {}).get("sides", {})
        unfiltered = sides.get("vector, valid=all", {}).get("p50_ms")
        for side in ("vector, valid=now", "vector, valid_at"):
            filtered = sides.get(side, {}).get("p50_ms")
            ratio = None if not (filtered and unfiltered) else filtered / unfiltered
            at = f"at {self.args.rows:,} rows" if self.args.rows else "(--rows 0)"
            rows.append((f"p50 {side} / valid=all", ratio, "<= 1.1x", at))
        for name, value, target, note in rows:
            value_text = UNAVAILABLE if value is None else f"{value:.3f}"
            print(f"  {name:<46} {value_text:>10}   target {target:<8} {note}")
            self.results.setdefault("targets", {})[name] = {"value": value, "target": target}


def filler_operations(seed: int, count: int, exclude: list[str]) -> list[Operation]:
    """Other people's histories: operations up to ``count`` memory writes."""
    if count <= 0:
        return []
    return split_after_writes(operations(filler(seed, count, exclude)), count)[0]


def split_after_writes(
    ops: list[Operation], writes: int
) -> tuple[list[Operation], list[Operation]]:
    """The operations up to ``writes`` memory writes, and the rest."""
    seen = 0
    for index, op in enumerate(ops):
        if isinstance(op, Add):
            if seen == writes:
                return ops[:index], ops[index:]
            seen += 1
    return ops, []


def filler_vectors(ops: list[Operation], embedded: int, cache_dir: Path) -> dict[str, np.ndarray]:
    """Embeddings of the filler: its first ``embedded`` unique texts for real, the rest copies.

    A copy takes a real embedding, adds Gaussian noise of ``COPY_NOISE`` per
    dimension and renormalises: near it, as a paraphrase would be.
    """
    adds = [op for op in ops if isinstance(op, Add)]
    if not adds:
        return {}
    unique = list(dict.fromkeys(op.content for op in adds))
    real = unique[:embedded]
    base = embed_cached(real, cache_dir)
    by_text = dict(zip(real, base, strict=True))
    rng = np.random.default_rng(len(unique))
    vectors: dict[str, np.ndarray] = {}
    for n, op in enumerate(adds):
        vector = by_text.get(op.content)
        if vector is None:
            noisy = base[n % len(base)] + rng.normal(0, COPY_NOISE, base.shape[1])
            vector = (noisy / np.linalg.norm(noisy)).astype(np.float32)
        vectors[op.memory] = vector
    return vectors


async def run(args: argparse.Namespace, data: Dataset, vectors: dict[str, np.ndarray]) -> None:
    if args.database_url:
        settings = Settings(database_url=args.database_url, auto_migrate=True, pool_max_size=4)
    else:
        settings = Settings(
            data_dir=scratch_dir("memsvc-quality-"), auto_migrate=True, pool_max_size=4
        )
    async with MemoryService.open(settings) as svc:
        async with svc.pool.acquire() as conn:
            table = f"{settings.db_schema}.memories"
            await conn.execute(f"DELETE FROM {table} WHERE tenant_id = $1", TENANT)
        bench = QualityBench(svc, data, vectors, args)
        print(f"this memsvc has: {bench.caps.describe()}")
        print("stores")
        for store in stores(bench.caps):
            await bench.load(store, ("history", "duplicates"))
        for store in DEDUPE_ONLY:
            await bench.load(store, ("duplicates",))
        print(f"questions (k=5), {len(data.questions)} in all")
        await bench.quality()
        bench.dedupe_table()
        if args.rows:
            print(f"latency: {args.rows:,} rows")
            await bench.latency(args.rows)
        bench.targets()
    if args.json:
        args.json.write_text(json.dumps(bench.results, indent=1, default=str))
        print(f"results written to {args.json}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--people", type=int, default=40)
    parser.add_argument("--sessions", type=int, default=160)
    parser.add_argument("--repeats", type=int, default=5, help="ways each duplicate is said")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--rows", type=int, default=100_000, help="rows of the latency scope (0: skip it)"
    )
    parser.add_argument(
        "--filler-embedded",
        type=int,
        default=5_000,
        help="filler texts embedded for real; the rest reuse those embeddings plus noise",
    )
    parser.add_argument("--queries", type=int, default=200, help="latency queries")
    parser.add_argument("--dedupe-threshold", type=float, help="semantic dedupe similarity")
    parser.add_argument("--database-url", help="PostgreSQL with pgvector (default: embedded)")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--write", type=Path, help="write the dataset as JSON and exit")
    parser.add_argument(
        "--dedupe-sweep",
        action="store_true",
        help="print what cosine-threshold dedup does to the streams (no database), and exit",
    )
    parser.add_argument(
        "--pipeline",
        action="store_true",
        help="feed the history through svc.remember with a perfect scripted extractor, compare "
        "with writing it directly (benchmarks/memory_quality/pipeline.py), and exit",
    )
    parser.add_argument("--pipeline-runs", type=int, default=3, help="timed runs of --pipeline")
    parser.add_argument("--json", type=Path, help="write the results as JSON")
    args = parser.parse_args()

    data = generate(args.seed, args.people, args.sessions, args.repeats)
    inconsistent = problems(data)
    if inconsistent:
        raise SystemExit("the answer key is inconsistent:\n" + "\n".join(inconsistent[:20]))
    if args.write:
        args.write.write_text(data.to_json())
        print(f"dataset {data.digest()} written to {args.write}")
        return
    print(f"dataset: {json.dumps(data.describe())}")
    started = time.perf_counter()
    vectors = embed(data, args.cache_dir)
    print(f"  embeddings ready in {time.perf_counter() - started:.0f}s")
    if args.dedupe_sweep:
        for stream in data.streams:
            sweep.show(sweep.sweep(data, stream, vectors), stream)
        return
    if args.pipeline:
        asyncio.run(pipeline.run(args, data, vectors))
        return
    asyncio.run(run(args, data, vectors))


if __name__ == "__main__":
    main()
