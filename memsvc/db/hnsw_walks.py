"""How many candidates an HNSW walk of a partial index keeps.

memsvc's partial HNSW indexes (a memories scope's or subtree's, a LangGraph
store namespace's) hold one scope's vectors. A walk of such a graph keeps
``OWN_GRAPH_EF_FACTOR`` candidates per row it must find (at least
``OWN_GRAPH_EF_MIN``), not the connection's ``hnsw.ef_search``, which is
sized for the table's graph, where other scopes' vectors and filters reject
candidates: in a scope's own graph nearly every candidate counts. Fewer than
the minimum cost recall; more cost time for no recall (docs/benchmarks.md).
The fewer candidates a walk keeps, the more recall it loses as its graph
grows: a counted graph of more than ``OWN_GRAPH_SIZED_UP_TO`` vectors (a
big tenant's subtree) keeps the configured walk.
"""

from __future__ import annotations

OWN_GRAPH_EF_FACTOR = 2
OWN_GRAPH_EF_MIN = 40
OWN_GRAPH_SIZED_UP_TO = 50_000


def walk_target(query: str, ef_search: int, vector_type: str) -> str:
    """The query vector, yielded by a subquery that first sets ``hnsw.ef_search``.

    The executor runs the subquery before the index scan starts (the scan
    needs the vector first), so the walk keeps ``ef_search`` candidates. The
    setting lasts until the transaction ends: only for a statement in a
    transaction memsvc owns (in a caller's it would outlive the search).
    """
    return (
        f"(SELECT {query}::{vector_type} FROM (SELECT set_config('hnsw.ef_search', "
        f"'{int(ef_search)}', true)) AS ef)"
    )


def own_graph_ef(rows: int, configured: int) -> int | None:
    """The hnsw.ef_search of a walk of a scope's own graph for ``rows``; None: ``configured``."""
    wanted = max(OWN_GRAPH_EF_MIN, OWN_GRAPH_EF_FACTOR * rows)
    return wanted if wanted < configured else None


def counted_graph_ef(rows: int, configured: int, vectors: int | None) -> int | None:
    """:func:`own_graph_ef` for a graph of ``vectors`` (None, not counted: ``configured``)."""
    if vectors is None or vectors > OWN_GRAPH_SIZED_UP_TO:
        return None
    return own_graph_ef(rows, configured)
