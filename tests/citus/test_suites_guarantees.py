"""Guarantees on the cluster: erasure on every shard; the LangChain store's tenants.

Erasure of a tenant is checked by reading every shard of every table on the
workers themselves (as-of reads are tested in ``test_suites_asof.py``).
"""

from __future__ import annotations

import asyncpg
from langchain_core.embeddings import Embeddings

from memsvc import HashingEmbedder, MemoryService, Scope, Settings
from memsvc.integrations.langchain import MemsvcVectorStore
from memsvc.testing.citus import CitusCluster
from tests.citus.helpers import worker_dsns

SECRET = "globex secret plan"


async def shards_holding(cluster: CitusCluster, schema: str, text: str) -> dict[str, int]:
    """Rows of any shard, on any worker, whose text (every column) contains ``text``."""
    conn = await asyncpg.connect(cluster.dsn)
    try:
        shards = await conn.fetch(
            "SELECT shard_name::text AS shard, nodeport FROM citus_shards "
            "WHERE table_name::text LIKE $1",
            f"{schema}.%",
        )
    finally:
        await conn.close()
    assert shards, "no shard found"
    by_port = {int(dsn.rsplit(":", 1)[1].split("/")[0]): dsn for dsn in worker_dsns(cluster)}
    found: dict[str, int] = {}
    for port, dsn in by_port.items():
        worker = await asyncpg.connect(dsn)
        try:
            for row in shards:
                if row["nodeport"] != port:
                    continue
                count = await worker.fetchval(
                    f"SELECT count(*) FROM {row['shard']} AS t WHERE strpos(t::text, $1) > 0",
                    text,
                )
                if count:
                    found[row["shard"]] = count
        finally:
            await worker.close()
    return found


async def test_erasing_a_tenant_leaves_none_of_its_text_on_any_shard_of_any_node(
    citus_cluster: CitusCluster, citus_service: MemoryService, citus_settings: Settings
) -> None:
    gone = Scope("globex", "p1", "a", "s")
    memories = [await citus_service.memories.add(gone, f"{SECRET} {i}") for i in range(3)]
    await citus_service.memories.update(memories[1].id, tenant="globex", content=f"{SECRET} v2")
    assert await citus_service.memories.delete(memories[0].id, tenant="globex")
    await citus_service.assemblies.create(gone, f"{SECRET} group", memory_ids=[memories[2].id])
    await citus_service.checkpoints.create(gone, {"note": f"{SECRET} checkpoint"})
    await citus_service.memories.add(Scope("acme", "bridge"), "acme keeps this")
    schema = citus_settings.db_schema
    before = await shards_holding(citus_cluster, schema, SECRET)
    assert len(before) >= 4, before  # memories, events, assemblies, checkpoints: the control
    receipt = await citus_service.erase(Scope(tenant="globex"))
    assert receipt.verified, receipt.remaining
    assert await shards_holding(citus_cluster, schema, SECRET) == {}
    assert await shards_holding(citus_cluster, schema, "acme keeps this") != {}


class _FixedEmbeddings(Embeddings):
    """Deterministic embeddings of the service's size (a hash of the text)."""

    def __init__(self, dim: int) -> None:
        self._embedder = HashingEmbedder(dim)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [list(map(float, self._embedder.embed_one(t))) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


async def test_the_langchain_vector_store_adds_finds_and_deletes_in_its_tenant(
    citus_service: MemoryService,
) -> None:
    dim = citus_service.settings.embedding_dim
    mine = MemsvcVectorStore(citus_service, _FixedEmbeddings(dim), Scope("acme", "docs"))
    theirs = MemsvcVectorStore(citus_service, _FixedEmbeddings(dim), Scope("globex", "docs"))
    await mine.aadd_texts(["the kettle is in the kitchen", "the cat sleeps"], ids=["k", "c"])
    await theirs.aadd_texts(["the kettle is in the kitchen"], ids=["k"])
    found = await mine.asimilarity_search("the kettle is in the kitchen", k=2)
    assert found[0].id == "k" and {d.id for d in found} == {"k", "c"}
    await mine.adelete(["k"])
    assert [d.id for d in await mine.aget_by_ids(["k", "c"])] == ["c"]
    assert [d.id for d in await theirs.aget_by_ids(["k"])] == ["k"]
