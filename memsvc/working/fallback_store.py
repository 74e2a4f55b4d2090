"""The in-process store that stands in for a Redis that was unreachable at start-up.

It keeps working memory in this process (a
:class:`~memsvc.working.local_store.LocalStore`). What it must not
do is *remove* things only here: Redis, which other processes read, may hold
the same sessions from before the outage, and a ``clear`` or an erasure that
reported success while Redis kept them would be a lie. So every removal
(``delete``, ``clear``, ``clear_scratchpad``, removing scratchpad entries,
erasing sessions) first reaches Redis, pinging within a bound
(:meth:`RedisStore.reach`), removes there, then here; if Redis does not answer it raises
:class:`~memsvc.core.errors.RedisUnavailableError` and removes nothing.

Results are this process's view (what the in-process store held), like
every other call on the fallback; erasing sessions counts both stores. The
store never switches to Redis for reads and writes (see
:func:`~memsvc.working.opening.open_working_store`).
"""

from __future__ import annotations

from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.working.local_store import LocalStore
from memsvc.working.redis_store import RedisStore


class FallbackStore(LocalStore):
    """A :class:`LocalStore` whose removals also reach Redis (``using_fallback`` is True).

    Args:
        settings: The service's settings (limits, Redis timeouts).
        redis_url: The Redis that did not answer at start-up.
    """

    def __init__(self, settings: Settings, redis_url: str) -> None:
        super().__init__(settings, using_fallback=True)
        self._redis = RedisStore.from_url(redis_url, settings)

    def describe(self) -> str:
        """Both places the state may live."""
        return f"{self._redis.describe()}, and this process's fallback store"

    async def reach(self) -> str:
        """Reach Redis (a bounded retry): what is erased must go there too."""
        await self._redis.reach()
        return self.describe()

    async def delete_value(self, scope: Scope, key: str) -> bool:
        """Delete ``key`` in Redis, then here; True when this process held it."""
        await self._redis.reach()
        await self._redis.delete_value(scope, key)
        return await super().delete_value(scope, key)

    async def clear_values(self, scope: Scope) -> int:
        """Delete every user key in Redis, then here; how many this process held."""
        await self._redis.reach()
        await self._redis.clear_values(scope)
        return await super().clear_values(scope)

    async def clear_scratchpad(self, scope: Scope) -> int:
        """Empty the scratchpad in Redis, then here; how many entries this process held."""
        await self._redis.reach()
        await self._redis.clear_scratchpad(scope)
        return await super().clear_scratchpad(scope)

    async def remove_scratchpad_entries(self, scope: Scope, entries: list[str]) -> int:
        """Remove the entries in Redis, then here; how many went here."""
        await self._redis.reach()
        await self._redis.remove_scratchpad_entries(scope, entries)
        return await super().remove_scratchpad_entries(scope, entries)

    async def erase_sessions(self, scope: Scope, *, descendants: bool) -> int:
        """Drop the sessions in Redis, then here; sessions dropped in each, added."""
        await self._redis.reach()
        in_redis = await self._redis.erase_sessions(scope, descendants=descendants)
        return in_redis + await super().erase_sessions(scope, descendants=descendants)

    async def count_state(self, scope: Scope, *, descendants: bool) -> int:
        """Keys of the sessions left in Redis and here."""
        in_redis = await self._redis.count_state(scope, descendants=descendants)
        return in_redis + await super().count_state(scope, descendants=descendants)

    async def close(self) -> None:
        """Drop this process's sessions and close the Redis client."""
        await super().close()
        await self._redis.close()
