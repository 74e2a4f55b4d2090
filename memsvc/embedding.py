"""Embedders: async callables turning texts into vectors."""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np

from memsvc.errors import ValidationError

Embedder = Callable[[Sequence[str]], Awaitable[Sequence[Any]]]
"""Anything ``await embedder(["text", ...])`` that returns one vector per text."""

_TOKEN = re.compile(r"\w+", re.UNICODE)


class HashingEmbedder:
    """Deterministic feature-hashing embeddings: no model, no download.

    Each lower-cased word (and each pair of adjacent words) is hashed to a
    dimension and a sign; the counts are L2-normalised. Texts sharing words get
    similar vectors, which is enough for demos and tests, not for semantics.
    """

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim

    def embed_one(self, text: str) -> np.ndarray[Any, np.dtype[np.float32]]:
        """The embedding of one text (synchronously)."""
        vector = np.zeros(self.dim, dtype=np.float32)
        words = [w.lower() for w in _TOKEN.findall(text)]
        features = words + [f"{a} {b}" for a, b in itertools.pairwise(words)]
        for feature in features:
            digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "little") % self.dim
            sign = 1.0 if digest[4] & 1 else -1.0
            vector[bucket] += sign
        norm = float(np.linalg.norm(vector))
        if norm == 0.0:
            vector[0] = 1.0  # an empty text still needs a valid direction
            return vector
        return vector / norm

    async def __call__(self, texts: Sequence[str]) -> list[np.ndarray[Any, np.dtype[np.float32]]]:
        return [self.embed_one(text) for text in texts]


# The embedders memsvc ships, by the name ``MEMSVC_EMBEDDER`` uses. A model
# backed embedder (imported lazily) joins this table when memsvc ships one.
_FACTORIES: dict[str, Callable[[int], Embedder]] = {
    "hashing": HashingEmbedder,
}


def embedder_from_spec(spec: str, dim: int) -> Embedder:
    """The embedder a setting names (``MEMSVC_EMBEDDER``), producing ``dim``-sized vectors.

    Args:
        spec: An embedder's name: ``hashing`` today.
        dim: The database's embedding dimension (``Settings.embedding_dim``).

    Raises:
        ValidationError: ``spec`` names no embedder memsvc ships (field ``embedder``).
    """
    factory = _FACTORIES.get(spec.strip().lower()) if isinstance(spec, str) else None
    if factory is None:
        known = ", ".join(sorted(_FACTORIES))
        raise ValidationError("embedder", f"unknown embedder {spec!r}; memsvc ships: {known}")
    return factory(dim)
