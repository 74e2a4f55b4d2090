"""A blocking, thread-safe client for thread-based agent frameworks.

The same method names as the async API, without ``await``::

    from memsvc.sync import SyncMemoryService

    with SyncMemoryService.open(Settings()) as svc:
        memory = svc.memories.add(scope, "the user prefers metric units")
        hits = svc.memories.search(scope, "units", k=5)
        svc.working(scope).append_scratchpad("checked the span table")

One event loop runs in a background thread and owns the connection pool;
every call is submitted to it and waited for. Any number of threads may call
at once: their calls run concurrently on the pool, and each write keeps the
guarantees of the async API.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar

from memsvc.core.errors import MemsvcError
from memsvc.core.models import Change
from memsvc.core.scope import Include, Scope
from memsvc.core.settings import Settings
from memsvc.embedding import Embedder
from memsvc.erasure.receipt import ErasureReceipt
from memsvc.extraction.protocols import Extractor
from memsvc.memories.ranking import Reranker
from memsvc.remember.result import RememberResult
from memsvc.service import MemoryService

T = TypeVar("T")


class _LoopThread:
    """An event loop running forever in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="memsvc-sync", daemon=True
        )
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise MemsvcError("the sync client cannot be called from its own event loop")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


class _Blocking:
    """Wraps an async object: its coroutine methods become blocking calls."""

    def __init__(self, target: Any, runner: _LoopThread) -> None:
        self._target = target
        self._runner = runner

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)
        if not inspect.iscoroutinefunction(attribute):
            return attribute

        @functools.wraps(attribute)
        def call(*args: Any, **kwargs: Any) -> Any:
            return self._runner.run(attribute(*args, **kwargs))

        return call

    def __repr__(self) -> str:
        return f"<blocking {self._target!r}>"


class BlockingChanges:
    """A blocking iterator over the async change feed, run on the client's loop."""

    def __init__(self, feed: AsyncIterator[Change], runner: _LoopThread) -> None:
        self._feed = feed
        self._runner = runner

    def __iter__(self) -> Iterator[Change]:
        return self

    def __next__(self) -> Change:
        try:
            return self._runner.run(_next(self._feed))
        except StopAsyncIteration:
            raise StopIteration from None

    def close(self) -> None:
        """Stop following (closes the feed's listening connection)."""
        aclose = getattr(self._feed, "aclose", None)
        if aclose is not None:
            self._runner.run(aclose())

    def __enter__(self) -> BlockingChanges:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


async def _next(feed: AsyncIterator[Change]) -> Change:
    return await anext(feed)


class SyncMemoryService:
    """:class:`memsvc.MemoryService` for synchronous code.

    ``memories``, ``assemblies``, ``checkpoints``, ``policies`` and ``maintenance``
    have the async API's methods, blocking; ``working(scope)`` returns a blocking WorkingMemory;
    ``erase(scope)`` blocks until the erasure's receipt is ready.
    """

    def __init__(self, service: MemoryService, runner: _LoopThread) -> None:
        self._service = service
        self._runner = runner
        self.settings = service.settings
        self.memories: Any = _Blocking(service.memories, runner)
        self.assemblies: Any = _Blocking(service.assemblies, runner)
        self.checkpoints: Any = _Blocking(service.checkpoints, runner)
        self.policies: Any = _Blocking(service.policies, runner)
        self.maintenance: Any = _Blocking(service.maintenance, runner)

    @classmethod
    def open(
        cls,
        settings: Settings | None = None,
        *,
        embedder: Embedder | None = None,
        reranker: Reranker | None = None,
        next_embedder: Embedder | None = None,
        extractor: Extractor | None = None,
    ) -> SyncMemoryService:
        """Open the service (see :meth:`memsvc.MemoryService.open`) on a background loop.

        ``reranker`` is an async callable; it runs on the background loop.
        ``next_embedder``: the model an embedding-model migration moves to.
        ``extractor``: what :meth:`remember` uses when a call names none.
        """
        runner = _LoopThread()
        try:
            service = runner.run(
                MemoryService._open(
                    settings or Settings(), embedder, reranker, next_embedder,
                    extractor=extractor,
                )
            )
        except BaseException:
            runner.stop()
            raise
        return cls(service, runner)

    @property
    def service(self) -> MemoryService:
        """The async service underneath; its coroutines run only on :attr:`loop`."""
        return self._service

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The background event loop that owns the service's connections."""
        return self._runner.loop

    def changes(
        self,
        scope: Scope | None = None,
        *,
        include: Include = "descendants",
        since: str | datetime | None = None,
        with_values: bool = False,
    ) -> BlockingChanges:
        """The change feed (see :meth:`memsvc.MemoryService.changes`) as a blocking iterator.

        ``for change in svc.changes(scope, since=cursor): ...``; close it (or use
        it as a context manager) to stop following.
        """
        feed = self._service.changes(scope, include=include, since=since, with_values=with_values)
        return BlockingChanges(feed, self._runner)

    def working(self, scope: Scope) -> Any:
        """The blocking working memory of a session."""
        return _Blocking(self._service.working(scope), self._runner)

    def erase(self, scope: Scope, **options: Any) -> ErasureReceipt:
        """:meth:`memsvc.MemoryService.erase`, blocking (same keyword options)."""
        return self._runner.run(self._service.erase(scope, **options))

    def remember(self, scope: Scope, messages: Sequence[Any], **options: Any) -> RememberResult:
        """:meth:`memsvc.MemoryService.remember`, blocking (same keyword options)."""
        return self._runner.run(self._service.remember(scope, messages, **options))

    def close(self) -> None:
        """Close the service and stop the background loop."""
        try:
            self._runner.run(self._service.close())
        finally:
            self._runner.stop()

    def __enter__(self) -> SyncMemoryService:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
