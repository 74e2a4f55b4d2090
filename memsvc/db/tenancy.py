"""Which tenant a repository call acts for (row-level security).

With ``Settings.row_level_security`` on, PostgreSQL policies show and accept
only rows whose ``tenant_id`` equals the transaction's ``memsvc.tenant``
setting. Each public repository method records its tenant (from its
``scope`` or ``tenant=`` argument) in a context variable; the repository sets
it with ``set_config(..., true)`` at the start of the transaction its
statements run in, so it lasts exactly one transaction and a pooled
connection never carries one tenant's context into another's request.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, ParamSpec, TypeVar

from memsvc.core.scope import Scope

P = ParamSpec("P")
R = TypeVar("R")

current_tenant: ContextVar[str | None] = ContextVar("memsvc_current_tenant", default=None)

SET_TENANT = "SELECT set_config('memsvc.tenant', $1, true)"


def _tenant_of(bound: inspect.BoundArguments) -> str | None:
    arguments = bound.arguments
    scope = arguments.get("scope")
    if isinstance(scope, Scope):
        return scope.tenant
    tenant = arguments.get("tenant")
    return tenant if isinstance(tenant, str) else None


def acts_for_tenant(method: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Record the tenant of a repository method's call (its ``scope`` or ``tenant``)."""
    signature = inspect.signature(method)

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        repository: Any = args[0]
        if not repository._settings.row_level_security:
            return await method(*args, **kwargs)
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return await method(*args, **kwargs)  # let the method report the bad call
        tenant = _tenant_of(bound)
        if tenant is None:
            return await method(*args, **kwargs)  # an outer call may have set it
        token = current_tenant.set(tenant)
        try:
            return await method(*args, **kwargs)
        finally:
            current_tenant.reset(token)

    return wrapper


def tenant_scoped(cls: type[R]) -> type[R]:
    """Apply :func:`acts_for_tenant` to every public coroutine method of a repository."""
    for name, member in list(vars(cls).items()):
        if not name.startswith("_") and inspect.iscoroutinefunction(member):
            setattr(cls, name, acts_for_tenant(member))
    return cls
