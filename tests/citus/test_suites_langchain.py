"""LangChain's own vector store tests (``langchain-tests``), unmodified, on the cluster.

``VectorStoreIntegrationTests`` (its sync and async tests) runs on a
SyncMemoryService over a distributed schema migrated with the suite's
6-dimension embeddings, emptied before each test.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from langchain_core.vectorstores import VectorStore
from langchain_tests.integration_tests.vectorstores import VectorStoreIntegrationTests

from memsvc.integrations.langchain import MemsvcVectorStore
from memsvc.sync import SyncMemoryService
from memsvc.testing.citus import CitusCluster, CitusSchema, unique_schema_name
from memsvc.testing.postgres import run_in_own_loop
from tests.integrations.conftest import SMALL_DIM
from tests.integrations.test_langchain_standard import SCOPE


@pytest.fixture(scope="module")
def dim6_schema(citus_cluster: CitusCluster) -> Iterator[CitusSchema]:
    """A distributed schema with the suite's 6-dimension embeddings, built once."""
    schema = CitusSchema(citus_cluster, embedding_dim=SMALL_DIM, db_schema=unique_schema_name())
    run_in_own_loop(schema.build())
    yield schema
    run_in_own_loop(schema.drop())


class TestVectorStoreOnTheCluster(VectorStoreIntegrationTests):
    """The standard suite on a SyncMemoryService over the cluster."""

    @pytest.fixture
    def vectorstore(self, dim6_schema: CitusSchema) -> Iterator[VectorStore]:  # type: ignore[override]
        run_in_own_loop(dim6_schema.reset())
        with SyncMemoryService.open(dim6_schema.settings) as svc:
            yield MemsvcVectorStore(svc, self.get_embeddings(), SCOPE)
