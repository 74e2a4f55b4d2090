"""Fixtures of memsvc's own suite, on top of the ``memsvc.testing`` plugin.

Everything runs against real servers the suite starts itself (embedded
PostgreSQL with pgvector, a private redis-server) or the ones named by
``MEMSVC_TEST_DATABASE_URL`` / ``MEMSVC_TEST_REDIS_URL``.
"""

from __future__ import annotations

import pytest

from memsvc import MemoryService, Scope, Settings


@pytest.fixture
def settings(memsvc_settings: Settings) -> Settings:
    """Settings of this test's fresh database."""
    return memsvc_settings


@pytest.fixture
def service(memsvc_service: MemoryService) -> MemoryService:
    """An open MemoryService (HashingEmbedder, 384 dimensions) on a fresh database."""
    return memsvc_service


@pytest.fixture
def scope() -> Scope:
    """A session scope under tenant/project/agent."""
    return Scope(tenant="acme", project="bridge", agent="planner", session="s-42")
