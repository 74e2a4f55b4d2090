"""Calls from other threads into the event loop that owns a service's connections.

A ``MemoryService``'s pool belongs to the loop it was opened on. The
integrations' blocking methods (LangGraph's ``put``/``get_tuple``, LangChain's
``similarity_search``...) are called from other threads: they submit the
coroutine to that loop and wait. Called on the loop itself they would wait
for ever, so they refuse instead. Their async methods, awaited on another
loop (a :class:`~memsvc.sync.SyncMemoryService`'s runs in a thread of its
own), submit their database work to the service's loop the same way.

Every integration takes either client: :func:`async_service` finds the
``MemoryService`` behind it.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Coroutine
from typing import Any, TypeVar, cast

from memsvc.core.errors import MemsvcError, ValidationError
from memsvc.service import MemoryService
from memsvc.sync import SyncMemoryService

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
    if loop.is_closed() or not loop.is_running():
        # Submitted there, it would never run.
        coroutine.close()
        raise BlockingCallError(
            "the service's event loop is not running: await its integrations on that "
            "loop, or use a SyncMemoryService (whose loop runs in a background thread)"
        )
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, loop))


class ServiceTypeError(ValidationError, TypeError):
    """An integration was given something other than a memsvc client."""


def async_service(svc: object, owner: str) -> MemoryService:
    """The :class:`MemoryService` behind ``svc``: itself, or a SyncMemoryService's.

    Anything else is a :class:`ServiceTypeError` (a TypeError and a
    ValidationError naming ``svc``) saying what to pass.
    """
    if isinstance(svc, SyncMemoryService):
        return svc.service
    if isinstance(svc, MemoryService):
        return svc
    raise ServiceTypeError(
        "svc",
        f"{owner} takes an open memsvc.MemoryService or memsvc.sync.SyncMemoryService "
        f"(from MemoryService.open() or SyncMemoryService.open()), not {type(svc).__name__}",
    )


class _OnServiceLoop:
    """``target``'s coroutine methods, run on the service's loop whichever loop awaits them.

    Everything else reads and writes through to ``target``.
    """

    def __init__(self, target: object, service: MemoryService) -> None:
        self.__dict__.update(_target=target, _service=service)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)
        if not inspect.iscoroutinefunction(attribute):
            return attribute

        @functools.wraps(attribute)
        async def call(*args: Any, **kwargs: Any) -> Any:
            return await run_on(self._service.loop, attribute(*args, **kwargs))

        self.__dict__[name] = call  # found directly from now on
        return call

    def __setattr__(self, name: str, value: Any) -> None:
        self.__dict__.pop(name, None)  # a method replaced on the target is wrapped anew
        setattr(self._target, name, value)


def on_service_loop(target: T, service: MemoryService) -> T:
    """``target`` (a repository) whose coroutine methods always run on ``service.loop``."""
    return cast(T, _OnServiceLoop(target, service))
