"""Which working-memory store a service uses: Redis, in process, or the fallback."""

from __future__ import annotations

import logging

from memsvc.core.errors import WorkingMemoryError
from memsvc.core.settings import Settings
from memsvc.working.local_store import LocalStore
from memsvc.working.store import WorkingStore

log = logging.getLogger(__name__)


async def open_working_store(settings: Settings) -> tuple[WorkingStore, bool]:
    """Open the store the settings ask for; returns ``(store, using_fallback)``.

    With ``redis_url`` set, Redis is used if it answers PING within
    ``redis_timeout_s``. If it does not, a warning is logged and an in-process
    :class:`~memsvc.working.fallback_store.FallbackStore` is returned
    (``using_fallback=True``; its removals still reach Redis or fail, see
    there) -- unless ``working_memory_require_redis`` is set,
    in which case :class:`~memsvc.core.errors.WorkingMemoryError` is raised. The
    choice is made once: a Redis that dies later makes calls fail, it never
    switches stores silently.

    Raises:
        WorkingMemoryError: Redis is required but unreachable.
    """
    if settings.redis_url is None:
        return LocalStore(settings), False

    from memsvc.working.redis_store import RedisStore

    store = RedisStore.from_url(settings.redis_url, settings)
    if await store.ping():
        return store, False
    await store.close()
    if settings.working_memory_require_redis:
        raise WorkingMemoryError(
            f"Redis at {store.display_url} did not answer within {settings.redis_timeout_s}s "
            "and working_memory_require_redis is set"
        )
    log.warning(
        "Redis at %s is unreachable; working memory falls back to an in-process store "
        "(not shared between processes, lost on exit; removals still reach Redis or fail)",
        store.display_url,
    )
    from memsvc.working.fallback_store import FallbackStore

    return FallbackStore(settings, settings.redis_url), True
