"""LangGraph's saver and store on the cluster: their conformance and single-node tests.

Imported here, the tests run with ``tests/citus/conftest.py``'s ``service``
and ``settings`` (the distributed schema, emptied per test):

- LangGraph's checkpointer conformance suite
  (``langgraph-checkpoint-conformance``) with every capability, with
  retention on, and under row-level security (a runtime role on a schema
  migrated with it);
- the differential store test (MemsvcStore against LangGraph's in-memory
  store on random batches), on a 16-dimension schema of its own, with a
  quarter of its operations for CI time (both of its search paths still
  run);
- a handful of the store's tests, picked for CI time to cover each statement
  Citus refused before (puts over an existing item, TTL refresh and sweep)
  and the rest of the store's paths (search, filters, namespaces, tenants,
  racing puts, export and import, row-level security);
- a search of a namespace too big to scan exactly, which on Citus walks the
  table's graph (the coordinator has no statistics to weigh the namespace
  by, so no namespace index and no sign-bit plan).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from langgraph.store.base import PutOp

from memsvc import HashingEmbedder, MemoryService
from memsvc.integrations.langgraph import MemsvcStore
from memsvc.testing.citus import CitusCluster, CitusSchema, unique_schema_name
from memsvc.testing.postgres import run_in_own_loop, settings_for_tests
from tests.citus.test_row_level_security import rls_schema  # noqa: F401  (a fixture)
from tests.integrations import test_langgraph_store_differential as differential
from tests.integrations.test_langgraph_saver import (  # noqa: F401  (tests, found by name)
    run_conformance,
    test_conformance_suite_passes_with_every_capability,
    test_conformance_suite_passes_with_retention_on,
)
from tests.integrations.test_langgraph_store import (  # noqa: F401  (tests, found by name)
    check_store_under_row_level_security,
    store,
    test_concurrent_puts_to_one_key_leave_one_whole_item,
    test_export_then_import_restores_store_items_with_their_vectors,
    test_list_namespaces_prefix_suffix_depth_and_paging,
    test_put_get_delete_round_trip,
    test_search_by_prefix_and_filter_compares_numbers_as_numbers,
    test_semantic_search_ranks_by_the_nearest_indexed_field,
    test_tenants_do_not_see_each_other,
    test_ttl_expires_refreshes_on_read_and_is_swept,
)
from tests.integrations.test_langgraph_store_differential import (  # noqa: F401
    test_memsvc_store_answers_like_the_in_memory_store,
)
from tests.integrations.test_langgraph_store_search import MID, exact
from tests.integrations.test_langgraph_store_search import embed_function as topic_embeddings

# A quarter of the single-node run's operations (10,000): the cluster's hop
# makes each batch several times slower.
DIFFERENTIAL_OPERATIONS = 2_500


@pytest.fixture(autouse=True)
def fewer_differential_operations(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(differential, "OPERATIONS", DIFFERENTIAL_OPERATIONS)


@pytest.fixture(scope="module")
def small_schema(citus_cluster: CitusCluster) -> Iterator[CitusSchema]:
    """A distributed schema with the differential test's 16-dimension embeddings."""
    schema = CitusSchema(
        citus_cluster, embedding_dim=differential.DIMS, db_schema=unique_schema_name()
    )
    run_in_own_loop(schema.build())
    yield schema
    run_in_own_loop(schema.drop())


@pytest.fixture
async def small_service(small_schema: CitusSchema) -> AsyncIterator[MemoryService]:
    """The differential test's service, on the cluster (the name it asks for)."""
    await small_schema.reset()
    async with MemoryService.open(small_schema.settings) as service:
        yield service


async def test_conformance_suite_passes_under_row_level_security_on_the_cluster(
    rls_schema: tuple[CitusSchema, str],  # noqa: F811  (the fixture)
) -> None:
    schema, runtime_dsn = rls_schema
    settings = settings_for_tests(runtime_dsn, row_level_security=True, db_schema=schema.schema)
    async with MemoryService.open(settings, embedder=HashingEmbedder()) as service:
        await run_conformance(service, tenant="acme")


async def test_store_works_under_row_level_security_on_the_cluster(
    rls_schema: tuple[CitusSchema, str],  # noqa: F811  (the fixture)
) -> None:
    schema, runtime_dsn = rls_schema
    await check_store_under_row_level_security(
        settings_for_tests(runtime_dsn, row_level_security=True, db_schema=schema.schema)
    )


async def test_a_big_namespace_search_walks_the_graph_and_finds_the_true_neighbours(
    service: MemoryService,
) -> None:
    dims = service.settings.embedding_dim
    mid = MemsvcStore(
        service, index={"dims": dims, "embed": topic_embeddings(dims), "fields": ["text"]}
    )
    ops = [PutOp(("mid",), f"k{i}", {"text": f"d{i}", "i": i}) for i in range(MID)]
    ops += [PutOp(("rest",), f"r{i}", {"text": f"d{i + 6000}"}) for i in range(3 * MID)]
    for start in range(0, len(ops), 500):
        await mid.abatch(ops[start : start + 500])
    found = wanted = 0
    for i in range(5):
        truth = {k for k, _ in (await exact(service, f"q{i}", "mid"))[:10]}
        hits = await mid.asearch(("mid",), query=f"q{i}", limit=10)
        assert len(hits) == 10 and all(h.namespace == ("mid",) for h in hits)
        found += len(truth & {h.key for h in hits})
        wanted += 10
    assert found / wanted >= 0.9
    await mid.await_index_builds()
    async with service.pool.acquire() as conn:
        catalog = await conn.fetchval(
            f"SELECT count(*) FROM {service.settings.db_schema}.langgraph_store_namespace_indexes"
        )
    assert catalog == 0
