"""Calls from other threads into the event loop that owns a service's connections.

A ``MemoryService``'s pool belongs to the loop it was opened on. The
integrations' blocking methods (LangGraph's ``put``/``get_tuple``, LangChain's
``similarity_search``...) are called from other threads: they submit the
coroutine to that loop and wait. Called on the loop itself they would wait
for ever, so they refuse instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from memsvc.errors import MemsvcError

T = TypeVar("T")


class BlockingCallError(MemsvcError, RuntimeError):
    """A blocking call that cannot be served: on the service's own loop, or with it stopped."""


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The loop running in this thread, if any."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def run_blocking(
    loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, T], *, owner: str, use: str
) -> T:
    """Run ``coroutine`` on ``loop`` from another thread and wait for its result.

    ``owner`` names the caller's class and ``use`` its async forms, for the
    error raised when called on ``loop`` itself.
    """
    if running_loop() is loop:
        coroutine.close()
        raise BlockingCallError(
            f"{owner}'s sync methods would block the service's own event loop: call them "
            f"from another thread, or await the async forms ({use}) on it"
        )
    if loop.is_closed() or not loop.is_running():
        coroutine.close()
        raise BlockingCallError(
            "the service's event loop is not running: use the async methods on that "
            "loop, or a SyncMemoryService (whose loop runs in a background thread)"
        )
    return asyncio.run_coroutine_threadsafe(coroutine, loop).result()


async def run_on(loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, T]) -> T:
    """Await ``coroutine`` from any loop: directly on ``loop``, submitted from another."""
    if asyncio.get_running_loop() is loop:
        return await coroutine
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, loop))
