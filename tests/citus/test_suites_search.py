"""The single-node search tests (every ``include``, filters, ranking, pages), on the cluster.

Imported here, they run with ``tests/citus/conftest.py``'s ``service`` and
``settings`` (the distributed schema, emptied per test).
"""

from __future__ import annotations

from tests.test_memories_search import *  # noqa: F403

# Left out for CI time: the checks of how statements are built (no server
# involved), and those building large scopes (seconds each on the cluster)
# to check the planner's choice of the HNSW index, a single-node concern.
for _name in (
    "test_every_placeholder_of_a_shape_has_its_value",
    "test_search_values_are_bound_in_the_order_the_scope_condition_numbers_them",
    "test_large_scopes_use_the_hnsw_index_and_small_ones_scan_exactly",
    "test_selective_filter_on_a_large_scope_still_returns_a_full_page",
    "test_validity_filters_keep_the_hnsw_plan",
):
    del globals()[_name]
