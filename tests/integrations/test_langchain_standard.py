"""LangChain's own vector store tests (``langchain-tests``), unmodified, on memsvc.

``VectorStoreIntegrationTests`` holds the sync and the async tests; they run
three times against real PostgreSQL: with a SyncMemoryService; with a
MemoryService whose loop runs in another thread (the sync tests submit to it
from the test's thread, the async ones from pytest's loop); and with a
SyncMemoryService reaching PostgreSQL only through pgbouncer in transaction
pooling mode.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from langchain_core.vectorstores import VectorStore
from langchain_tests.integration_tests.vectorstores import VectorStoreIntegrationTests

from memsvc import MemoryService, Scope, Settings
from memsvc.integrations.langchain import MemsvcVectorStore
from memsvc.sync import SyncMemoryService
from memsvc.testing.postgres import MigratedTemplate, TestPostgres, settings_for_tests
from tests.integrations.conftest import LoopThread
from tests.reliability.servers import database_behind_pgbouncer

SCOPE = Scope(tenant="acme", project="docs")


async def _open(settings: Settings) -> MemoryService:
    return await MemoryService.open(settings)


class TestSyncClientVectorStore(VectorStoreIntegrationTests):
    """The standard suite on a SyncMemoryService."""

    @pytest.fixture
    def vectorstore(self, dim6_settings: Settings) -> Iterator[VectorStore]:  # type: ignore[override]
        with SyncMemoryService.open(dim6_settings) as svc:
            yield MemsvcVectorStore(svc, self.get_embeddings(), SCOPE)


class TestServiceVectorStore(VectorStoreIntegrationTests):
    """The standard suite on a MemoryService running on a loop in another thread."""

    @pytest.fixture
    def vectorstore(  # type: ignore[override]
        self, dim6_settings: Settings, loop_thread: LoopThread
    ) -> Iterator[VectorStore]:
        svc = loop_thread.run(_open(dim6_settings))
        try:
            yield MemsvcVectorStore(svc, self.get_embeddings(), SCOPE)
        finally:
            loop_thread.run(svc.close())


@pytest.fixture
async def bouncer_settings(
    memsvc_postgres: TestPostgres, dim6_template: MigratedTemplate
) -> AsyncIterator[Settings]:
    """Settings of a fresh 6-dimension database reached only through pgbouncer."""
    async with database_behind_pgbouncer(
        memsvc_postgres, dim6_template.name, "memsvc_lcb"
    ) as dsn:
        yield settings_for_tests(dsn, pgbouncer=True, **dim6_template.settings_overrides)


class TestVectorStoreThroughPgbouncer(VectorStoreIntegrationTests):
    """The standard suite through pgbouncer in transaction pooling mode."""

    @pytest.fixture
    def vectorstore(self, bouncer_settings: Settings) -> Iterator[VectorStore]:  # type: ignore[override]
        with SyncMemoryService.open(bouncer_settings) as svc:
            yield MemsvcVectorStore(svc, self.get_embeddings(), SCOPE)
