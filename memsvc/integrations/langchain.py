"""LangChain's vector store on memsvc: :class:`MemsvcVectorStore` (extra ``langchain``).

Each document is a keyed memory of one exact scope: the document id is the
memory's key, so adding a document under an existing id replaces it in one
atomic upsert (racing writers never create two). Searches run memsvc's
search within the scope; ``filter=`` takes memsvc's ``where`` language::

    store = MemsvcVectorStore(svc, embeddings, Scope(tenant="acme", project="docs"))
    store.add_texts(["metric units only"], metadatas=[{"kind": "rule"}], ids=["r1"])
    store.similarity_search("units", k=4, filter={"kind": {"$in": ["rule", "note"]}})

Relevance scores (``similarity_search_with_relevance_scores``, the
``similarity_score_threshold`` retriever) follow LangChain's PGVector and
in-memory stores: the cosine similarity, so thresholds carry over (see
:func:`relevance_function`).

``svc`` is a :class:`memsvc.MemoryService` or a :class:`memsvc.sync.SyncMemoryService`.
The service's connections belong to its event loop: async methods awaited on
another loop, and sync methods called from any other thread, are submitted to
it and waited for. Sync methods cannot be called on the service's own loop
(they would block it); use the ``a*`` forms there.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

try:
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_core.vectorstores import VectorStore
    from langchain_core.vectorstores.utils import maximal_marginal_relevance
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "memsvc.integrations.langchain needs langchain-core: pip install 'memsvc[langchain]'"
    ) from exc

from memsvc.core.errors import NotFoundError, ValidationError
from memsvc.core.models import Memory, SearchHit
from memsvc.core.scope import Scope
from memsvc.core.validation import validate_limit, validate_name, validate_scope
from memsvc.db.errors import translate_errors
from memsvc.integrations.loop_bridge import async_service, run_blocking, run_on
from memsvc.memories.repository import KEY_MAX_LENGTH, MAX_K
from memsvc.service import MemoryService
from memsvc.sync import SyncMemoryService

T = TypeVar("T")

__all__ = ["MemsvcVectorStore", "relevance_function"]


class _LoopBridge:
    """Runs coroutines on the loop that owns the service's connections."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run to completion from synchronous code on any other thread."""
        return run_blocking(
            self.loop,
            coroutine,
            owner="MemsvcVectorStore",
            use="asimilarity_search, aadd_documents, ...",
        )

    async def arun(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Await from any loop: directly on the service's, submitted from another."""
        return await run_on(self.loop, coroutine)


def _resolve(
    svc: MemoryService | SyncMemoryService, loop: asyncio.AbstractEventLoop | None
) -> tuple[MemoryService, asyncio.AbstractEventLoop]:
    if isinstance(svc, SyncMemoryService):
        return svc.service, loop or svc.loop
    service = async_service(svc, "MemsvcVectorStore")
    return service, loop or service.loop


def _document(memory: Memory) -> Document:
    # Memories added to the scope without a key (svc.memories.add) show
    # their memory id; documents added here always carry their key.
    return Document(
        id=memory.key if memory.key is not None else str(memory.id),
        page_content=memory.content,
        metadata=dict(memory.metadata),
    )


class MemsvcVectorStore(VectorStore):
    """A LangChain ``VectorStore`` whose documents are memsvc memories of one scope.

    Searches return the documents valid now (a memory invalidated with
    ``svc.memories.invalidate`` is left out); pass ``valid="all"`` or
    ``valid_at=<datetime>`` as keyword arguments to any search to choose.

    Args:
        svc: An open MemoryService or SyncMemoryService.
        embedding: The LangChain embeddings; their size must be the
            service's ``embedding_dim``.
        scope: The exact scope the documents live in (and searches look in).
        loop: The event loop that owns ``svc``'s connections; by default the
            loop it was opened on.
    """

    def __init__(
        self,
        svc: MemoryService | SyncMemoryService,
        embedding: Embeddings,
        scope: Scope,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self._service, service_loop = _resolve(svc, loop)
        self._bridge = _LoopBridge(service_loop)
        if not isinstance(embedding, Embeddings):
            raise ValidationError("embedding", "must be a langchain_core Embeddings")
        self._embedding = embedding
        self.scope = validate_scope(scope)

    @property
    def embeddings(self) -> Embeddings:
        """The embeddings documents and queries are embedded with."""
        return self._embedding

    # ------------------------------------------------------------------ input

    def _batch(
        self,
        texts: Iterable[str],
        metadatas: Sequence[dict[str, Any] | None] | None,
        ids: Sequence[str | None] | None,
    ) -> tuple[list[str], list[dict[str, Any]], list[str]]:
        """Texts, metadatas and ids, checked; generated ids where none was given."""
        text_list = list(texts)
        for i, text in enumerate(text_list):
            if not isinstance(text, str):
                raise ValidationError(f"texts[{i}]", "must be a string")
        if metadatas is not None and len(metadatas) != len(text_list):
            raise ValidationError(
                "metadatas", f"has {len(metadatas)} entries for {len(text_list)} texts"
            )
        if ids is not None and len(ids) != len(text_list):
            raise ValidationError("ids", f"has {len(ids)} entries for {len(text_list)} texts")
        metas: list[dict[str, Any]] = []
        for i in range(len(text_list)):
            meta = metadatas[i] if metadatas else None
            if meta is not None and not isinstance(meta, Mapping):
                raise ValidationError(f"metadatas[{i}]", "must be a mapping")
            metas.append(dict(meta or {}))
        keys = [
            str(uuid.uuid4())
            if ids is None or ids[i] is None
            else validate_name(ids[i], f"ids[{i}]", KEY_MAX_LENGTH)
            for i in range(len(text_list))
        ]
        return text_list, metas, keys

    @staticmethod
    def _keys(ids: Sequence[str] | None, field: str = "ids") -> list[str]:
        if ids is None:
            raise ValidationError(field, "must list the ids to act on")
        if isinstance(ids, str):
            raise ValidationError(field, "must be a list of ids, not one string")
        return [validate_name(key, f"{field}[{i}]", KEY_MAX_LENGTH) for i, key in enumerate(ids)]

    # ------------------------------------------------------------ on the loop

    def _acquire(self) -> Any:
        # One connection for a whole batch (a transaction for writes), waited
        # for no longer than a statement may run.
        return self._service.pool.acquire(timeout=self._service.settings.command_timeout_s)

    async def _put(
        self,
        texts: list[str],
        metadatas: list[dict[str, Any]],
        keys: list[str],
        vectors: list[list[float]],
    ) -> None:
        """Upsert the batch in one transaction: every document, or none."""
        if len(vectors) != len(texts):
            raise ValidationError(
                "embedding", "the embeddings returned the wrong number of vectors"
            )
        # The last occurrence of a repeated id wins, as if added one by one;
        # writing in key order makes concurrent batches lock keys in one order
        # (no deadlocks between them).
        latest = {key: i for i, key in enumerate(keys)}
        memories = self._service.memories
        with translate_errors():
            async with (
                self._acquire() as conn,
                conn.transaction(),
            ):
                for key in sorted(latest):
                    i = latest[key]
                    await memories.put(
                        self.scope,
                        key,
                        texts[i],
                        embedding=vectors[i],
                        metadata=metadatas[i],
                        conn=conn,
                    )

    async def _delete(self, keys: list[str]) -> None:
        memories = self._service.memories
        with translate_errors():
            async with (
                self._acquire() as conn,
                conn.transaction(),
            ):
                for key in sorted(set(keys)):
                    try:
                        found = await memories.get_by_key(self.scope, key, conn=conn)
                    except NotFoundError:
                        continue
                    await memories.delete(found.id, tenant=self.scope.tenant, conn=conn)

    async def _get(self, keys: list[str]) -> list[Document]:
        memories = self._service.memories
        documents = []
        with translate_errors():
            async with self._acquire() as conn:
                for key in dict.fromkeys(keys):
                    try:
                        documents.append(
                            _document(await memories.get_by_key(self.scope, key, conn=conn))
                        )
                    except NotFoundError:
                        continue
        return documents

    async def _search(
        self,
        vector: Sequence[float],
        k: int,
        where: dict[str, Any] | None,
        *,
        with_embeddings: bool = False,
        options: dict[str, Any] | None = None,
    ) -> list[SearchHit]:
        # Valid time: the documents valid now by default; a search's keyword
        # arguments may ask for valid="all" or valid_at=<datetime>.
        options = options or {}
        return await self._service.memories.search(
            self.scope,
            list(vector),
            k=k,
            include="exact",
            where=where,
            with_embeddings=with_embeddings,
            valid=options.get("valid", "now"),
            valid_at=options.get("valid_at"),
        )

    # ------------------------------------------------------------------ writes

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Embed and store texts; an id already in the store replaces its document.

        The whole call is one transaction: on any error nothing is written.
        """
        text_list, metas, keys = self._batch(texts, metadatas, ids)
        if not text_list:
            return []
        vectors = self._embedding.embed_documents(text_list)
        self._bridge.run(self._put(text_list, metas, keys, vectors))
        return keys

    async def aadd_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Async :meth:`add_texts`."""
        text_list, metas, keys = self._batch(texts, metadatas, ids)
        if not text_list:
            return []
        vectors = await self._embedding.aembed_documents(text_list)
        await self._bridge.arun(self._put(text_list, metas, keys, vectors))
        return keys

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete the documents with these ids (ids not stored are ignored).

        ``ids`` is required: this store never empties its scope by default.
        """
        self._bridge.run(self._delete(self._keys(ids)))
        return True

    async def adelete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Async :meth:`delete`."""
        await self._bridge.arun(self._delete(self._keys(ids)))
        return True

    # ------------------------------------------------------------------ reads

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The stored documents among ``ids``, in the order asked for."""
        return self._bridge.run(self._get(self._keys(ids)))

    async def aget_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """Async :meth:`get_by_ids`."""
        return await self._bridge.arun(self._get(self._keys(ids)))

    def similarity_search_with_score_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[tuple[Document, float]]:
        """The ``k`` nearest documents with their similarity (higher is closer)."""
        hits = self._bridge.run(self._search(embedding, k, filter, options=kwargs))
        return [(_document(hit.memory), hit.score) for hit in hits]

    async def asimilarity_search_with_score_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[tuple[Document, float]]:
        """Async :meth:`similarity_search_with_score_by_vector`."""
        hits = await self._bridge.arun(self._search(embedding, k, filter, options=kwargs))
        return [(_document(hit.memory), hit.score) for hit in hits]

    def similarity_search_with_score(
        self,
        query: str,
        k: int = 4,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[tuple[Document, float]]:
        """The ``k`` documents nearest to ``query``, with their similarity.

        ``filter`` is a memsvc ``where`` filter on the metadata, e.g.
        ``{"kind": "rule", "year": {"$gte": 2024}}``.
        """
        vector = self._embedding.embed_query(query)
        return self.similarity_search_with_score_by_vector(vector, k, filter, **kwargs)

    async def asimilarity_search_with_score(
        self,
        query: str,
        k: int = 4,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[tuple[Document, float]]:
        """Async :meth:`similarity_search_with_score`."""
        vector = await self._embedding.aembed_query(query)
        return await self.asimilarity_search_with_score_by_vector(vector, k, filter, **kwargs)

    def similarity_search(
        self,
        query: str,
        k: int = 4,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """The ``k`` documents nearest to ``query`` (``filter``: memsvc ``where``)."""
        return [doc for doc, _ in self.similarity_search_with_score(query, k, filter, **kwargs)]

    async def asimilarity_search(
        self,
        query: str,
        k: int = 4,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """Async :meth:`similarity_search`."""
        hits = await self.asimilarity_search_with_score(query, k, filter, **kwargs)
        return [doc for doc, _ in hits]

    def similarity_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """The ``k`` documents nearest to an embedding."""
        hits = self.similarity_search_with_score_by_vector(embedding, k, filter, **kwargs)
        return [doc for doc, _ in hits]

    async def asimilarity_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """Async :meth:`similarity_search_by_vector`."""
        hits = await self.asimilarity_search_with_score_by_vector(embedding, k, filter, **kwargs)
        return [doc for doc, _ in hits]

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        """How ``similarity_search_with_relevance_scores`` turns scores into relevance.

        As LangChain's own PGVector and in-memory stores do (see
        :func:`relevance_function`): the cosine similarity for cosine distance.
        """
        return relevance_function(self._service.settings.distance)

    # --------------------------------------------------- max marginal relevance

    @staticmethod
    def _fetch_k(k: int, fetch_k: int, lambda_mult: float) -> int:
        """How many candidates to fetch; checks the arguments by the names passed."""
        k = validate_limit(k, "k", MAX_K)
        if not isinstance(lambda_mult, int | float) or not 0.0 <= lambda_mult <= 1.0:
            raise ValidationError("lambda_mult", "must be between 0 and 1")
        return max(k, validate_limit(fetch_k, "fetch_k", MAX_K))

    @staticmethod
    def _diverse(
        query: Sequence[float], hits: list[SearchHit], k: int, lambda_mult: float
    ) -> list[Document]:
        candidates = [hit.memory for hit in hits if hit.memory.embedding is not None]
        if not candidates:
            return []
        chosen = maximal_marginal_relevance(
            np.asarray(query, dtype=np.float32),
            [memory.embedding for memory in candidates if memory.embedding is not None],
            lambda_mult=lambda_mult,
            k=k,
        )
        return [_document(candidates[i]) for i in chosen]

    def max_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """``k`` documents among the ``fetch_k`` nearest, chosen for relevance and diversity.

        ``lambda_mult`` runs from 0 (most diverse) to 1 (most relevant).
        """
        hits = self._bridge.run(
            self._search(
                embedding,
                self._fetch_k(k, fetch_k, lambda_mult),
                filter,
                with_embeddings=True,  # maximal marginal relevance compares them
                options=kwargs,
            )
        )
        return self._diverse(embedding, hits, k, lambda_mult)

    async def amax_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """Async :meth:`max_marginal_relevance_search_by_vector`."""
        hits = await self._bridge.arun(
            self._search(
                embedding,
                self._fetch_k(k, fetch_k, lambda_mult),
                filter,
                with_embeddings=True,  # maximal marginal relevance compares them
                options=kwargs,
            )
        )
        return self._diverse(embedding, hits, k, lambda_mult)

    def max_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """Max marginal relevance search for a text query."""
        vector = self._embedding.embed_query(query)
        return self.max_marginal_relevance_search_by_vector(
            vector, k, fetch_k, lambda_mult, filter, **kwargs
        )

    async def amax_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """Async :meth:`max_marginal_relevance_search`."""
        vector = await self._embedding.aembed_query(query)
        return await self.amax_marginal_relevance_search_by_vector(
            vector, k, fetch_k, lambda_mult, filter, **kwargs
        )

    # ------------------------------------------------------------ construction

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> MemsvcVectorStore:
        """A store on ``svc=`` and ``scope=`` (keyword arguments) holding ``texts``."""
        store = cls._from_kwargs(embedding, kwargs)
        store.add_texts(texts, metadatas, ids=ids)
        return store

    @classmethod
    async def afrom_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> MemsvcVectorStore:
        """Async :meth:`from_texts`."""
        store = cls._from_kwargs(embedding, kwargs)
        await store.aadd_texts(texts, metadatas, ids=ids)
        return store

    @classmethod
    def _from_kwargs(cls, embedding: Embeddings, kwargs: dict[str, Any]) -> MemsvcVectorStore:
        for name in ("svc", "scope"):
            if name not in kwargs:
                raise ValidationError(name, "is required (pass it as a keyword argument)")
        return cls(kwargs["svc"], embedding, kwargs["scope"], loop=kwargs.get("loop"))


def relevance_function(distance: str) -> Callable[[float], float]:
    """Relevance in [0, 1] from memsvc's similarity, as the stores LangChain users come from.

    - ``cosine``: the cosine similarity, ``1 - cosine distance``, which is what
      ``InMemoryVectorStore`` scores and what ``PGVector``'s relevance function
      makes of its cosine distance. A ``score_threshold`` of 0.5 keeps what
      is at least that similar; near-orthogonal documents score near 0.
    - ``ip``: the inner product (PGVector's relevance for max inner product
      when it is positive).
    - ``l2``: ``1 - distance / sqrt(2)`` (PGVector's, for unit vectors), from
      memsvc's ``1 / (1 + distance)``.

    Below 0 (a document pointing away from the query) relevance is 0, where
    those stores would return a negative number LangChain warns about.
    """
    if distance == "l2":
        return _euclidean_relevance
    return _clamped


def _clamped(similarity: float) -> float:
    return min(1.0, max(0.0, similarity))


def _euclidean_relevance(similarity: float) -> float:
    distance = 1.0 / similarity - 1.0  # memsvc's score is 1 / (1 + distance), in (0, 1]
    return _clamped(1.0 - distance / math.sqrt(2.0))
