"""The retrieval benchmark's labels: what counts as a snippet, a rare token, a hit."""

from __future__ import annotations

import numpy as np

from benchmarks.retrieval import corpus, dataset

CHANGELOG = """\
grep (3.8-5) unstable; urgency=medium

  * src/dfa.c (build_state): Do not cast the free argument, which confuses
    some compilers on older platforms and is not needed at all.
  * Fix the build with newer gnulib releases when NLS is disabled in configure.

 -- Some One <someone@example.org>  Mon, 02 Jan 2023 10:00:00 +0100
"""

DOCSTRING = """Return the retry delay for an attempt.

    >>> delay(3)
    0.8

The delay grows with ``retry_backoff_ms`` and is capped, so that a client which
keeps failing does not wait for ever before it tries again.
"""


def test_snippets_keep_prose_and_drop_headers_trailers_and_code() -> None:
    snippets = list(corpus.snippets_of(CHANGELOG)) + list(corpus.snippets_of(DOCSTRING))
    joined = " ".join(snippets)
    assert "urgency" not in joined and "example.org" not in joined and ">>>" not in joined
    assert any("src/dfa.c (build_state)" in s for s in snippets)
    assert any("retry_backoff_ms" in s and "``" not in s for s in snippets)
    assert all(corpus.MIN_CHARS <= len(s) <= corpus.MAX_CHARS for s in snippets)


def test_token_kinds() -> None:
    kinds = {
        "retry_backoff_ms": "identifier",
        "os.path.join": "identifier",
        "getElementById": "identifier",
        "2.13.0": "version",
        "src/dfa.c": "path",
        "/usr/share/doc": "path",
        "ENG-4312": "ticket",
        "macOS": None,
        "Python": None,
    }
    assert {token: dataset.token_kind(token) for token in kinds} == kinds


def test_exact_term_queries_name_every_snippet_of_the_scope_holding_the_token() -> None:
    texts = [
        "Set retry_backoff_ms to a larger value when the server is slow to answer clients.",
        "The retry_backoff_ms setting doubles after each failed attempt of the client.",
        "Unrelated text about the weather and the garden, written for nobody at all.",
        "Mentions retry_backoff_ms too, but it lives in another scope of the store.",
    ]
    data = dataset.Dataset(texts, ["a", "a", "a", "b"], ["s1", "s1", "s1", "s2"])
    queries = dataset._exact_candidates(data, np.random.default_rng(0))
    by_scope = {q["scope"]: q for q in queries if q["token"] == "retry_backoff_ms"}
    assert by_scope["s1"]["relevant"] == [0, 1]
    assert by_scope["s2"]["relevant"] == [3]
    assert "retry_backoff_ms" in by_scope["s1"]["text"]
    assert 3 <= len(by_scope["s1"]["text"].split()) <= 4


def test_recall_and_reciprocal_rank() -> None:
    assert dataset.recall_at([5, 1, 2], [1, 2]) == 1.0
    assert dataset.recall_at([5, 6], [1, 2]) == 0.0
    # Of 12 relevant rows, 10 in the top 10 is a perfect score.
    assert dataset.recall_at(list(range(10)), list(range(12))) == 1.0
    assert dataset.reciprocal_rank([5, 6, 2], [2]) == 1 / 3
    assert dataset.reciprocal_rank([5, 6], [2]) == 0.0


def test_copies_fill_other_scopes_with_the_stored_text_and_nearby_embeddings() -> None:
    texts = [f"Snippet number {i} about the retry delay of the client." for i in range(5)]
    sources = ["deb-a", "deb-a", "py-b", "py-b", "py-c"]
    scopes = [dataset.BIG_SCOPE, dataset.BIG_SCOPE, dataset.BIG_SCOPE, "py-b", "py-c"]
    data = dataset.Dataset(texts, sources, scopes)
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(5, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)

    extra = dataset.copies(data, vectors, 12, seed=3)

    assert len(extra.texts) == len(extra.scopes) == len(extra.vectors) == 12
    # Every snippet is copied twice before any is copied a third time.
    assert extra.rounds == [1] * 5 + [2] * 5 + [3] * 2
    assert sorted(extra.texts[:5]) == sorted(texts) == sorted(extra.texts[5:10])
    assert dataset.BIG_SCOPE not in extra.scopes
    for text, source, scope, round_, vector in zip(
        extra.texts, extra.sources, extra.scopes, extra.rounds, extra.vectors, strict=True
    ):
        original = texts.index(text)
        assert source == sources[original]
        assert scope == f"{source}#{round_}"
        assert abs(float(np.linalg.norm(vector)) - 1) < 1e-5
        # Near the original, yet not the same vector.
        assert 0.8 < float(vector @ vectors[original]) < 0.9999
    # Within one scope no text repeats (a store refuses duplicates in a scope).
    assert len(set(zip(extra.scopes, extra.texts, strict=True))) == 12
    # The same seed gives the same copies.
    again = dataset.copies(data, vectors, 12, seed=3)
    assert again.texts == extra.texts and np.array_equal(again.vectors, extra.vectors)
