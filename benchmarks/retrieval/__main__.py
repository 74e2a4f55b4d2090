"""Retrieval benchmark: vector, text and hybrid search on real text, one run.

    python -m benchmarks.retrieval                      # 20,000 snippets, latency among 100,000
    python -m benchmarks.retrieval --snippets 2000 --rows 0   # a quick run, no copies
    python -m benchmarks.retrieval --snippets 100000    # 100,000 real snippets, no copies

Reports recall@10 and MRR of each search mode on the exact-term and semantic
query sets (the real snippets only), then p50/p99 latency in the big scope
(10,000 rows) of a store of ``--rows`` rows, text-only p50 against raw SQL
running the same ``websearch_to_tsquery`` + ``ts_rank_cd`` query on an
identical table, and hybrid p50 against vector p50, each next to its target.

Embedding 100,000 texts takes over an hour on a small machine, so before the
latency part the store is filled up to ``--rows`` with copies of the stored
snippets (see ``dataset.copies``): the same text, the embedding plus noise of
0.02 per dimension renormalised, a new id, in scopes of their own
(``"{source}#{n}"``), none in the big scope, whose rows and queries stay the
real ones. The raw SQL peers run on a copy of the whole table made with COPY.
The corpus and its embeddings are cached outside the project (``--cache-dir``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np

from benchmarks.memories import bytes_connection
from benchmarks.retrieval import dataset
from benchmarks.retrieval.dataset import recall_at, reciprocal_rank
from benchmarks.scratch import scratch_dir
from memsvc import MemoryService, Scope, Settings, ValidationError
from memsvc.db.codecs import vector_bytes
from memsvc.db.embedded import EmbeddedPostgres
from memsvc.memories.queries import MEMORY_COLUMNS_NO_EMBEDDING, RRF_K

TENANT = "bench"
MODES = ("vector", "text", "hybrid")
# For comparison: hybrid with every word of the query required in the text arm.
STRICT = "hybrid, all words"
JOINED = re.compile(r"(?<=\w)[-_](?=\w)")  # as memsvc.memories.repository reads queries
DEFAULT_CACHE = Path.home() / ".cache" / "memsvc-bench" / "retrieval"
# "CREATE [UNIQUE] INDEX name ON [ONLY] memsvc.memories ", as pg_get_indexdef writes it.
_INDEX_TARGET = re.compile(r"^(CREATE (?:UNIQUE )?INDEX) \S+ ON (?:ONLY )?memsvc\.memories ")


def ms(values: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(values), p)) * 1000


class RetrievalBench:
    def __init__(
        self,
        svc: MemoryService,
        admin: asyncpg.Connection,
        raw: asyncpg.Connection,
        raw_pool: asyncpg.Pool,
        unreset_pool: asyncpg.Pool,
    ) -> None:
        self.svc = svc
        self.admin = admin
        self.raw = raw
        # The raw text statement as an app runs it: through asyncpg's pool.
        self.raw_pool = raw_pool
        # The same without the reset query asyncpg sends when a connection
        # goes back (memsvc skips it for connections it left clean).
        self.unreset_pool = unreset_pool
        self.row_of: dict[Any, int] = {}
        self.scope_rows: dict[str, int] = {}
        self.results: dict[str, Any] = {}
        self.modes_available = False
        # Typed loosely: written against the search API issue 12 adds
        # (mode="text"|"hybrid", query_embedding=), which may not be merged yet.
        self.search: Any = svc.memories.search

    async def load(self, data: dataset.Dataset, vectors: np.ndarray) -> None:
        """Store every snippet in its scope (bulk, HNSW built once at the end)."""
        await self.admin.execute("TRUNCATE memsvc.memories, memsvc.memory_events CASCADE")
        t = time.perf_counter()
        async with self.index_dropped():
            metadata = [{"source": source} for source in data.sources]
            stored = await self.store(data.texts, data.scopes, vectors, metadata)
        self.row_of = {memory_id: row for row, memory_id in enumerate(stored)}
        self.scope_rows = dict(Counter(data.scopes))
        print(f"  loaded {len(data.texts):,} rows, HNSW built, in {time.perf_counter() - t:.1f}s")

    async def fill(self, extra: dataset.Copies) -> None:
        """Add the copies around the big scope (bulk, HNSW built again over every row)."""
        t = time.perf_counter()
        async with self.index_dropped():
            metadata = [
                {"source": source, "copy": round_}
                for source, round_ in zip(extra.sources, extra.rounds, strict=True)
            ]
            await self.store(extra.texts, extra.scopes, extra.vectors, metadata)
        rows = await self.admin.fetchval("SELECT count(*) FROM memsvc.memories")
        print(
            f"  filled to {rows:,} rows with {len(extra.texts):,} copies in "
            f"{len(set(extra.scopes)):,} scopes, HNSW built, in {time.perf_counter() - t:.1f}s"
        )

    async def store(
        self,
        texts: list[str],
        scopes: list[str],
        vectors: np.ndarray,
        metadata: list[dict[str, Any]],
    ) -> list[Any]:
        """``add_many`` by scope, 2,000 at a time; the ids in the order of ``texts``."""
        ids: list[Any] = [None] * len(texts)
        by_scope: dict[str, list[int]] = {}
        for row, scope in enumerate(scopes):
            by_scope.setdefault(scope, []).append(row)
        for scope, rows in by_scope.items():
            for start in range(0, len(rows), 2_000):
                part = rows[start : start + 2_000]
                stored = await self.svc.memories.add_many(
                    Scope(TENANT, scope),
                    [
                        {"content": texts[r], "embedding": vectors[r], "metadata": metadata[r]}
                        for r in part
                    ],
                )
                for r, memory in zip(part, stored, strict=True):
                    ids[r] = memory.id
        return ids

    @asynccontextmanager
    async def index_dropped(self) -> AsyncIterator[None]:
        """Without memsvc's HNSW index inside, built again (then ANALYZE) on the way out."""
        definition = await self.admin.fetchval(
            "SELECT pg_get_indexdef('memsvc.ix_memories_embedding_hnsw'::regclass)"
        )
        await self.admin.execute("DROP INDEX memsvc.ix_memories_embedding_hnsw")
        yield
        await self.admin.execute("SET maintenance_work_mem = '512MB'")
        await self.admin.execute(definition)
        await self.admin.execute("RESET maintenance_work_mem")
        await self.admin.execute("ANALYZE memsvc.memories")

    async def probe_modes(self) -> None:
        """Whether this memsvc has ``mode="text"|"hybrid"`` yet (a TypeError says no)."""
        try:
            await self.search(Scope(TENANT, dataset.BIG_SCOPE), "probe", mode="text", k=1)
        except TypeError as exc:
            print(f"  text/hybrid modes missing in this memsvc ({exc}): vector only")
            return
        except ValidationError as exc:
            if exc.field != "mode":
                raise
            # Before issue 12 ``mode`` meant the plan (auto/exact/index).
            print(f"  text/hybrid modes missing in this memsvc ({exc}): vector only")
            return
        self.modes_available = True

    async def run(self, mode: str, scope: str, text: str, vector: np.ndarray) -> list[Any]:
        if mode == "vector":
            # A vector query: the default mode both before and after issue 12.
            return await self.search(Scope(TENANT, scope), vector, k=10)
        if mode == "text":
            return await self.search(Scope(TENANT, scope), text, mode="text", k=10)
        return await self.search(
            Scope(TENANT, scope), text, mode="hybrid", query_embedding=vector, k=10
        )

    async def quality(
        self, name: str, queries: list[dict[str, Any]], vectors: np.ndarray, truth: list[list[int]]
    ) -> None:
        modes = (*MODES, STRICT) if self.modes_available else ("vector",)
        recalls: dict[str, list[float]] = {m: [] for m in modes}
        rrs: dict[str, list[float]] = {m: [] for m in modes}
        for query, vector, relevant in zip(queries, vectors, truth, strict=True):
            for mode in modes:
                if mode == STRICT:
                    got = await self.strict_hybrid(query["scope"], query["text"], vector)
                else:
                    hits = await self.run(mode, query["scope"], query["text"], vector)
                    got = [self.row_of[h.memory.id] for h in hits]
                recalls[mode].append(recall_at(got, relevant))
                rrs[mode].append(reciprocal_rank(got, relevant))
        print(f"  {name} ({len(queries)} queries)")
        figures: dict[str, Any] = {}
        for mode in (*MODES, STRICT):
            if mode in recalls:
                r, mrr = statistics.mean(recalls[mode]), statistics.mean(rrs[mode])
                figures[mode] = {"recall@10": round(r, 4), "mrr": round(mrr, 4)}
                print(f"    {mode:<17} recall@10 {r:.4f}   MRR {mrr:.4f}")
            else:
                print(f"    {mode:<17} (mode not available in this memsvc)")
        # Recall by group: the kind of token, and the big scope against the rest.
        groups: dict[str, list[int]] = {}
        for i, query in enumerate(queries):
            groups.setdefault(query.get("kind") or "", []).append(i)
            where = "big scope" if query["scope"] == dataset.BIG_SCOPE else "other scopes"
            groups.setdefault(where, []).append(i)
            # In a scope of at most 10 rows any full page is the whole scope.
            small = self.scope_rows[query["scope"]] <= 10
            groups.setdefault("scope <= 10" if small else "scope > 10", []).append(i)
        for group, members in sorted(groups.items()):
            if group:
                by_mode = {m: statistics.mean(recalls[m][i] for i in members) for m in modes}
                shown = "  ".join(f"{m} {r:.3f}" for m, r in by_mode.items())
                print(f"      {group:<12} ({len(members):>3}) recall@10  {shown}")
                figures.setdefault("by_group", {})[group] = {
                    m: round(r, 4) for m, r in by_mode.items()
                }
        self.results[name] = figures

    async def strict_hybrid(self, scope: str, text: str, vector: np.ndarray) -> list[int]:
        """Hybrid with every word required: vector and text mode fused here (RRF, 50 each)."""
        fused: dict[Any, float] = {}
        for hits in (
            await self.search(Scope(TENANT, scope), vector, k=50),
            await self.search(Scope(TENANT, scope), text, mode="text", k=50),
        ):
            for rank, hit in enumerate(hits, 1):
                fused[hit.memory.id] = fused.get(hit.memory.id, 0.0) + 1 / (RRF_K + rank)
        best = sorted(fused, key=lambda memory_id: -fused[memory_id])[:10]
        return [self.row_of[memory_id] for memory_id in best]

    async def raw_text_sql(self) -> str | None:
        """Raw SQL for the text arm on an identical table, or None without a tsvector column."""
        await self.raw_table()
        column = await self.admin.fetchrow(
            "SELECT a.attname, pg_get_expr(d.adbin, d.adrelid) AS expr FROM pg_attribute a "
            "LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
            "WHERE a.attrelid = 'memsvc.memories'::regclass AND a.atttypid = 'tsvector'::regtype "
            "AND NOT a.attisdropped"
        )
        if column is None:
            return None
        config = _text_config(column["expr"], self.svc)
        print(f"  raw SQL peer: bench_raw, column {column['attname']}, config {config}")
        tsv = column["attname"]
        # The columns text hits are built from (no embedding unless asked).
        return (
            f"SELECT {MEMORY_COLUMNS_NO_EMBEDDING}, ts_rank_cd({tsv}, q) AS rank "
            f"FROM bench_raw, websearch_to_tsquery('{config}', $1) q "
            "WHERE tenant_id = $2 AND project_id = $3 AND agent_id IS NULL AND session_id IS NULL "
            f"AND {tsv} @@ q AND (expires_at IS NULL OR expires_at > now()) "
            "ORDER BY rank DESC, id LIMIT 10"
        )

    async def raw_table(self) -> None:
        """``bench_raw``: memsvc's table with the same columns, rows and indexes, for raw SQL.

        Loaded as an app would load a table: COPY (binary) of every stored
        column, the generated tsvector computed by the server, then the
        indexes (GIN, HNSW, scope) built once the rows are in.
        """
        t = time.perf_counter()
        stored = await self.admin.fetch(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'memsvc.memories'::regclass "
            "AND attnum > 0 AND NOT attisdropped AND attgenerated = '' ORDER BY attnum"
        )
        columns = [row["attname"] for row in stored]
        indexes = await self.admin.fetch(
            "SELECT pg_get_indexdef(indexrelid) AS definition FROM pg_index "
            "WHERE indrelid = 'memsvc.memories'::regclass"
        )
        await self.admin.execute("DROP TABLE IF EXISTS bench_raw")
        await self.admin.execute(
            "CREATE TABLE bench_raw (LIKE memsvc.memories INCLUDING ALL EXCLUDING INDEXES)"
        )
        # Out of memsvc's table and into bench_raw at once, through the client.
        chunks: asyncio.Queue[bytes | None] = asyncio.Queue()

        async def copy_out() -> None:
            try:
                names = ", ".join(f'"{name}"' for name in columns)
                await self.admin.copy_from_query(
                    f"SELECT {names} FROM memsvc.memories", output=chunks.put, format="binary"
                )
            finally:
                await chunks.put(None)

        async def received() -> AsyncIterator[bytes]:
            while (chunk := await chunks.get()) is not None:
                yield chunk

        async with self.raw_pool.acquire() as conn:
            await asyncio.gather(
                copy_out(),
                conn.copy_to_table(
                    "bench_raw", source=received(), columns=columns, format="binary"
                ),
            )
        await self.admin.execute("SET maintenance_work_mem = '512MB'")
        for number, index in enumerate(indexes):
            await self.admin.execute(
                _INDEX_TARGET.sub(f"\\1 bench_raw_{number} ON bench_raw ", index["definition"])
            )
        await self.admin.execute("RESET maintenance_work_mem")
        await self.admin.execute("ANALYZE bench_raw")
        rows = await self.admin.fetchval("SELECT count(*) FROM bench_raw")
        print(
            f"  bench_raw: {rows:,} rows by COPY, {len(indexes)} indexes, "
            f"in {time.perf_counter() - t:.1f}s"
        )

    async def latency(
        self, queries: list[tuple[str, np.ndarray]], big_rows: int, rows: int
    ) -> None:
        """p50/p99 per mode in the big scope, then text against raw SQL, each interleaved.

        Two phases: on a shared machine a short statement that runs right after
        a vector or hybrid search is slowed several times, and turns keep their
        cyclic order, so text and its raw peers take turns among themselves.
        """
        if self.modes_available:
            raw_sql = await self.raw_text_sql()
        else:
            raw_sql = None
            await self.raw_table()
        modes = [*(MODES if self.modes_available else ("vector",)), "raw vector"]
        # For reference: memsvc's vector search against the same query in raw
        # SQL on the identical table, returning the same columns (memsvc's
        # hits carry no embedding unless asked).
        raw_vector_sql = (
            f"SELECT {MEMORY_COLUMNS_NO_EMBEDDING}, embedding <=> $1 AS distance FROM bench_raw "
            "WHERE tenant_id = $2 AND project_id = $3 AND agent_id IS NULL AND session_id IS NULL "
            "AND embedding IS NOT NULL AND (expires_at IS NULL OR expires_at > now()) "
            "ORDER BY embedding <=> $1 LIMIT 10"
        )
        # The same raw statement on memsvc's own table: tells the table from the client path.
        own_sql = raw_sql.replace("FROM bench_raw,", "FROM memsvc.memories,") if raw_sql else None
        versus = ["text", "raw", "raw own", "raw pool", "raw pool, no reset"] if raw_sql else []
        lat: dict[str, list[float]] = {side: [] for side in modes}
        lat.update({f"{side} *": [] for side in versus})
        # Client CPU per call (this process only; the server runs apart):
        # what memsvc's Python side costs beyond the raw statement's.
        cpu: dict[str, list[float]] = {key: [] for key in lat}
        agree = matched = 0

        async def timed(side: str, key: str, text: str, vector: np.ndarray) -> set[Any]:
            # "-" and "_" inside a word: spaces, as memsvc sends the text (and
            # the column's raw-token half reads it), so both run one tsquery.
            joined = JOINED.sub(" ", text)
            c = time.process_time()
            t = time.perf_counter()
            ids: set[Any] = set()
            if side == "raw vector":
                await self.raw.fetch(
                    raw_vector_sql, vector_bytes(vector), TENANT, dataset.BIG_SCOPE
                )
            elif side in ("raw", "raw own"):
                sql = raw_sql if side == "raw" else own_sql
                assert sql is not None
                rows = await self.raw.fetch(sql, joined, TENANT, dataset.BIG_SCOPE)
                ids = {row["id"] for row in rows}
            elif side in ("raw pool", "raw pool, no reset"):
                assert raw_sql is not None
                pool = self.raw_pool if side == "raw pool" else self.unreset_pool
                async with pool.acquire() as conn:
                    rows = await conn.fetch(raw_sql, joined, TENANT, dataset.BIG_SCOPE)
                ids = {row["id"] for row in rows}
            else:
                hits = await self.run(side, dataset.BIG_SCOPE, text, vector)
                ids = {hit.memory.id for hit in hits}
            lat[key].append(time.perf_counter() - t)
            cpu[key].append(time.process_time() - c)
            return ids

        for sides in (modes, versus):
            for qi, (text, vector) in enumerate(queries):
                # Rotate the order: whichever runs first warms the buffers for the rest.
                found: dict[str, set[Any]] = {}
                for side in sides[qi % len(sides) :] + sides[: qi % len(sides)]:
                    key = side if sides is modes else f"{side} *"
                    found[side] = await timed(side, key, text, vector)
                if sides is versus:
                    agree += found["raw"] == found["text"]
                    matched += bool(found["text"])
        print(f"  latency, {len(queries)} queries in the {big_rows:,}-row scope of {rows:,} rows")
        if raw_sql is not None:
            # The peer is only fair if it does the same work: same rows back.
            print(f"    raw SQL and text mode returned the same rows for {agree}/{len(queries)}")
            print(f"    text mode found rows for {matched}/{len(queries)} (the rest: none)")
            print("    (* text and its raw peers, timed in turns among themselves)")
        figures: dict[str, Any] = {}
        for side, values in lat.items():
            p50, p99 = ms(values, 50), ms(values, 99)
            # Median: a garbage collection or a background task lands in a few calls.
            cpu_us = statistics.median(cpu[side]) * 1e6
            figures[side] = {
                "p50_ms": round(p50, 3),
                "p99_ms": round(p99, 3),
                "client_cpu_us": round(cpu_us, 1),
            }
            label = {
                "raw *": "raw SQL text *",
                "raw own *": "raw, memories *",
                "raw pool *": "raw, pool *",
                "raw pool, no reset *": "raw, pool, no reset *",
                "raw vector": "raw SQL vector",
            }.get(side, side)
            print(
                f"    {label:<21} p50 {p50:7.2f} ms   p99 {p99:7.2f} ms   "
                f"client CPU {cpu_us:5.0f} us"
            )
        self.results["latency"] = figures

    def targets(self) -> None:
        print("targets")
        exact, semantic, lat = (
            self.results.get(k, {}) for k in ("exact-term", "semantic", "latency")
        )
        rows: list[tuple[str, str, str]] = []
        if "hybrid" in exact:
            gain = exact["hybrid"]["recall@10"] - exact["vector"]["recall@10"]
            rows.append(("exact-term hybrid - vector recall@10", f"{gain:+.4f}", ">= +0.20"))
        if "hybrid" in semantic:
            gap = semantic["hybrid"]["recall@10"] - semantic["vector"]["recall@10"]
            rows.append(("semantic hybrid - vector recall@10", f"{gap:+.4f}", ">= -0.02"))
        if "hybrid" in lat:
            ratio = lat["hybrid"]["p50_ms"] / lat["vector"]["p50_ms"]
            rows.append(("hybrid p50 / vector p50", f"{ratio:.2f}x", "<= 2.0x"))
        if "raw vector" in lat:
            ratio = lat["vector"]["p50_ms"] / lat["raw vector"]["p50_ms"]
            rows.append(("vector p50 / raw SQL vector p50", f"{ratio:.2f}x", "none (reference)"))
        if "raw *" in lat:
            text = lat["text *"]["p50_ms"]
            ratio = text / lat["raw *"]["p50_ms"]
            rows.append(("text p50 / raw SQL text p50", f"{ratio:.2f}x", "<= 1.3x"))
            ratio = text / lat["raw pool *"]["p50_ms"]
            rows.append(("text p50 / raw SQL through a pool p50", f"{ratio:.2f}x", "<= 1.3x"))
            ratio = text / lat["raw pool, no reset *"]["p50_ms"]
            rows.append(("text p50 / raw SQL, pool without reset", f"{ratio:.2f}x", "<= 1.3x"))
        if not rows:
            print("  none measurable: this memsvc has no text/hybrid modes yet")
        for name, value, target in rows:
            print(f"  {name:<40} {value:>9}   target {target}")
            self.results.setdefault("targets", {})[name] = [value, target]


def _text_config(expression: str | None, svc: MemoryService) -> str:
    """The text search configuration the stored tsvector is built with."""
    configured = getattr(svc.settings, "text_search_config", None)
    if isinstance(configured, str):
        return configured
    # Else the first configuration named in the generated column's expression.
    found = re.search(r"'(\w+)'::regconfig", expression or "")
    return found.group(1) if found else "simple"


async def _no_reset(conn: asyncpg.Connection) -> None:
    """A pool reset that sends nothing (the raw statements leave no session state)."""


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", help="PostgreSQL with pgvector (default: embedded)")
    parser.add_argument("--snippets", type=int, default=20_000, help="real snippets stored")
    parser.add_argument(
        "--rows",
        type=int,
        default=100_000,
        help="rows in the store for latency, the snippets plus copies of them (0: no copies)",
    )
    parser.add_argument("--queries", type=int, default=200, help="queries per set")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    args = parser.parse_args()

    t = time.perf_counter()
    pool = dataset.load_pool(args.cache_dir)
    data = dataset.build(pool, args.snippets, args.queries, args.seed)
    del pool
    # One call, so the model loads once.
    texts = data.texts + [q["text"] for q in data.exact] + [q["text"] for q in data.semantic]
    embedded_texts = dataset.embed_cached(texts, args.cache_dir)
    vectors, exact_vectors, semantic_vectors = np.split(
        embedded_texts, [len(data.texts), len(data.texts) + len(data.exact)]
    )
    semantic_truth = dataset.semantic_truth(data, vectors, semantic_vectors)
    description = data.describe()
    print(f"corpus ready in {time.perf_counter() - t:.0f}s: {json.dumps(description)}")
    copies = max(0, args.rows - len(data.texts))
    latency_rows = len(data.texts) + copies
    description["latency_rows"] = latency_rows
    description["copies"] = copies
    if description["big_scope_rows"] < 10_000 or latency_rows < 100_000:
        print(
            f"  note: latency scope is {description['big_scope_rows']:,} rows in a "
            f"{latency_rows:,}-row store (10,000 of 100,000 needs --snippets 20000 --rows 100000)"
        )

    embedded = None
    dsn = args.database_url
    if dsn is None:
        embedded = EmbeddedPostgres(scratch_dir("memsvc-bench-"))
        dsn = embedded.start()
    settings = Settings(database_url=dsn, auto_migrate=True, pool_max_size=4)
    svc = await MemoryService.open(settings)
    admin = await bytes_connection(dsn, {})
    raw = await bytes_connection(
        dsn,
        {
            "hnsw.ef_search": str(settings.hnsw_ef_search),
            "hnsw.iterative_scan": "relaxed_order",
            "hnsw.max_scan_tuples": str(settings.hnsw_max_scan_tuples),
        },
    )
    raw_pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
    unreset_pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4, reset=_no_reset)
    bench = RetrievalBench(svc, admin, raw, raw_pool, unreset_pool)
    bench.results["corpus"] = description
    try:
        await bench.load(data, vectors)
        await bench.probe_modes()
        await bench.quality(
            "exact-term", data.exact, exact_vectors, [q["relevant"] for q in data.exact]
        )
        await bench.quality("semantic", data.semantic, semantic_vectors, semantic_truth)
        if copies:
            await bench.fill(dataset.copies(data, vectors, copies, args.seed))
        big = [
            (q["text"], v)
            for qs, vs in ((data.exact, exact_vectors), (data.semantic, semantic_vectors))
            for q, v in zip(qs, vs, strict=True)
            if q["scope"] == dataset.BIG_SCOPE
        ]
        await bench.latency(big, description["big_scope_rows"], latency_rows)
        bench.targets()
    finally:
        await raw_pool.close()
        await unreset_pool.close()
        await raw.close()
        await admin.close()
        await svc.close()
        if embedded is not None:
            embedded.close()
    print(json.dumps(bench.results, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
