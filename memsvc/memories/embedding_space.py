"""Which embedding model a service's memories are in, and a migration to another one.

``memsvc reembed`` moves memories to a new embedding model while the service
runs (see :mod:`memsvc.ops.reembed`). A service follows it through
:class:`EmbeddingSpace`: it reads the ``embedding_migrations`` table at open
and again at most every ``embedding_state_refresh_s`` seconds, before a write
or a search. While a migration is in progress, writes and searches hold the
migration's row (``FOR SHARE``) in their transaction, so each one runs wholly
before the switch or wholly after it, and writers given the new model
(``next_embedder``) store both embeddings. After the switch, such a service
embeds with the new model; one without it refuses to embed (SchemaError)
rather than mix two models' vectors.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import asyncpg
import numpy as np

from memsvc.core.errors import SchemaError, ValidationError
from memsvc.core.settings import Settings
from memsvc.core.validation import validate_embedded, validate_embedding
from memsvc.db.codecs import vector_bytes
from memsvc.embedding import Embedder
from memsvc.memories import embedding_space_queries as q

log = logging.getLogger(__name__)

Vector = np.ndarray[Any, Any]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class EmbeddingMigration:
    """A migration to another embedding model (a row of ``embedding_migrations``)."""

    id: int
    embedder: str
    dim: int


class EmbeddingSpace:
    """The embedder and dimension writes and searches use now, and a migration in progress.

    Shared by the repositories of one service. ``next_embedder`` is the model a
    running (or future) ``memsvc reembed`` moves to; without it, writes made
    during a migration store only the old embedding (the migration's workers
    embed them later) and the service stops embedding after the switch.
    """

    def __init__(
        self,
        settings: Settings,
        embedder: Embedder | None,
        next_embedder: Embedder | None = None,
    ) -> None:
        self.embedder = embedder
        self.dim = settings.embedding_dim
        self.next_embedder = next_embedder
        self.migration: EmbeddingMigration | None = None
        self._settings = settings
        self._schema = settings.db_schema
        self._interval = settings.embedding_state_refresh_s
        self._checked = float("-inf")
        self._seen: int | None = None  # newest migration id known (None: not read yet)
        self._retired: str | None = None  # why this service may no longer embed
        self._followed: set[int] = set()  # switches already followed
        # Bumped at each switch followed: vectors computed under one
        # generation are only stored under the same one.
        self.generation = 0

    # ------------------------------------------------------------ state

    async def refresh(self, conn: asyncpg.Connection | asyncpg.Pool) -> None:
        """Read the newest migration now."""
        row = await conn.fetchrow(q.latest_migration(self._schema))
        self._checked = time.monotonic()
        if row is None:
            self._seen = 0
            return
        first_read = self._seen is None
        if row["switched_at"] is None:
            self.migration = EmbeddingMigration(row["id"], row["embedder"], row["dim"])
            if self.next_embedder is None and self._seen != row["id"]:
                log.warning(
                    "an embedding migration to %r is in progress and this service has no "
                    "next_embedder: its writes store only the old embedding, and it will stop "
                    "embedding at the switch (reopen it with next_embedder=...)",
                    row["embedder"],
                )
        elif (not first_read and row["id"] != self._seen) or self.migration is not None:
            # A migration switched since we last looked: follow it.
            self._switched(EmbeddingMigration(row["id"], row["embedder"], row["dim"]))
        self._seen = row["id"]

    def refresh_due(self) -> bool:
        """Whether the last read of the migration state is older than the interval."""
        return time.monotonic() - self._checked >= self._interval

    async def hold(self, conn: asyncpg.Connection) -> None:
        """Inside a transaction: pin the migration in progress until it ends.

        If the migration switched in the meantime, the service follows it first.
        """
        migration = self.migration
        if migration is None:
            return
        switched = await conn.fetchval(q.hold_migration(self._schema), migration.id)
        if switched is not False:
            self._switched(migration)

    def _switched(self, migration: EmbeddingMigration) -> None:
        # Concurrent calls of one service may each find the same switch.
        if migration.id in self._followed:
            return
        self._followed.add(migration.id)
        self.generation += 1
        if self.migration is not None and self.migration.id == migration.id:
            self.migration = None
        if self.next_embedder is not None:
            self.embedder, self.dim, self.next_embedder = self.next_embedder, migration.dim, None
            log.info("embedding migration %s switched: now embedding with %s", migration.id,
                     migration.embedder)
            return
        self._retired = (
            f"the memories moved to the embedding model {migration.embedder!r} "
            f"({migration.dim} dimensions); reopen the service with that embedder and "
            f"MEMSVC_EMBEDDING_DIM={migration.dim}"
        )

    def check(self) -> None:
        """Refuse to embed or search after a switch this service cannot follow."""
        if self._retired is not None:
            raise SchemaError(self._retired)

    @property
    def migrating(self) -> bool:
        """Whether a migration is in progress (as last read)."""
        return self.migration is not None

    # ------------------------------------------------------------ vectors

    def vector(self, value: object, field: str = "embedding") -> Vector:
        """``value`` checked as an embedding of the dimension in use now (a float32 copy)."""
        settings = self._settings
        return validate_embedding(
            value, self.dim, settings.vector_type, field, distance=settings.distance
        )

    async def embed(self, texts: Sequence[str], field: str) -> list[Vector]:
        """The embedder's vectors of ``texts``, checked (no embedder: a ValidationError)."""
        if self.embedder is None:
            raise ValidationError(field, "no embedding given and the service has no embedder")
        settings = self._settings
        return validate_embedded(
            await self.embedder(list(texts)),
            len(texts),
            self.dim,
            settings.vector_type,
            field,
            distance=settings.distance,
        )

    async def embeddings_for(
        self, content: str, embedding: object
    ) -> tuple[Vector | None, list[Vector] | None]:
        """The embedding a write of ``content`` stores, and (during a migration) the new model's.

        The one given, else the embedder's (None without an embedder).
        """
        if embedding is not None:
            vector = self.vector(embedding)
        elif self.embedder is None:
            return None, None
        else:
            vector = (await self.embed([content], "embedding"))[0]
        return vector, await self.embed_next([content])

    async def fill_missing(
        self,
        texts: Sequence[str],
        digests: Sequence[str],
        vectors: list[Any],
        stored: dict[str, Any],
    ) -> None:
        """Fill a batch's missing ``vectors`` (None), embedding each distinct content once.

        ``stored``: embeddings already stored, by content fingerprint (the same
        text embeds to the same vector), reused without an embedder call.
        """
        missing = [i for i, vector in enumerate(vectors) if vector is None]
        known = {digest: self.vector(vector) for digest, vector in stored.items()}
        first: dict[str, int] = {}  # digest -> the first item needing it embedded
        for i in missing:
            if digests[i] not in known:
                first.setdefault(digests[i], i)
        if first:
            computed = await self.embed([texts[i] for i in first.values()], "items.embedding")
            known.update(zip(first, computed, strict=True))
        for i in missing:
            vectors[i] = known[digests[i]]

    async def consistent(self, compute: Callable[[], Awaitable[T]]) -> tuple[int, T]:
        """Run ``compute`` (embeddings) until no switch of model happened during it.

        Returns the generation its result belongs to (see :meth:`held_vector`).
        """
        while True:
            generation = self.generation
            result = await compute()
            if self.generation == generation:
                return generation, result

    def held_vector(self, generation: int, vector: Any, next_vector: Any) -> Any:
        """The vector a write stores once it holds the migration row (see :meth:`hold`).

        The one computed under ``generation``, unless the migration switched
        between computing it and the write's hold: then the new model's.
        """
        if self.generation == generation or vector is None:
            return vector
        self.check()
        if next_vector is None:
            raise SchemaError(
                "an embedding-model migration switched during this call: embeddings are now "
                f"{self.dim}-dimensional; call again"
            )
        return next_vector

    # ------------------------------------------------------------ new model

    async def embed_next(self, texts: Sequence[str]) -> list[Vector] | None:
        """The new model's embeddings of ``texts`` while a migration runs (else None)."""
        migration = self.migration
        if migration is None or self.next_embedder is None or not texts:
            return None
        return validate_embedded(
            await self.next_embedder(list(texts)),
            len(texts),
            migration.dim,
            self._settings.vector_type,
            "next_embedder",
            distance=self._settings.distance,
        )

    async def write_next(
        self,
        conn: asyncpg.Connection,
        tenants: Sequence[str],
        ids: Sequence[Any],
        digests: Sequence[str],
        vectors: Sequence[Vector],
    ) -> None:
        """Store the new model's embeddings of rows written in this transaction.

        Call after :meth:`hold` (which may have found the migration switched:
        then there is no second column any more and nothing to do).
        """
        if self.migration is None or not ids:
            return
        wire = [vector_bytes(v, self._settings.vector_type) for v in vectors]
        await conn.execute(
            q.write_next(self._schema, self._settings.vector_type),
            list(tenants),
            list(ids),
            list(digests),
            wire,
        )
