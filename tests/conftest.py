"""Fixtures of memsvc's own suite, on top of the ``memsvc.testing`` plugin.

Everything runs against real servers the suite starts itself (embedded
PostgreSQL with pgvector, a private redis-server) or the ones named by
``MEMSVC_TEST_DATABASE_URL`` / ``MEMSVC_TEST_REDIS_URL``.
"""

from __future__ import annotations

from pathlib import Path

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


# The slow tier, which `pytest -m "not slow"` leaves out (CI runs everything):
# tests that inject faults or kill servers, soak, run thousands of
# operations, or start servers and processes of their own (a second cluster,
# a standby, pytest or memsvc in a child process). Single tests elsewhere
# carry @pytest.mark.slow themselves.
SLOW_PATHS = (
    "reliability/",
    "citus/",
    "test_embedded_server.py",
    "test_pytest_plugin.py",
    "test_replicas.py",
    "test_scale_benchmark.py",
    "test_retrieval_benchmark.py",
    "test_memory_quality_generator.py",
    "changes/test_exactly_once.py",
    "changes/test_epochs.py",
    "changes/test_stalls.py",
    "integrations/test_mcp_server.py",
    "integrations/test_langgraph_graph.py",
    "integrations/test_langgraph_store_differential.py",
)
TESTS = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        where = item.path.relative_to(TESTS).as_posix()
        if any(where == path or where.startswith(path) for path in SLOW_PATHS):
            item.add_marker(pytest.mark.slow)
