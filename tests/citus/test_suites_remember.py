"""The single-node tests of ``remember`` and ``consolidate``, run on the cluster.

Imported here, they run with ``tests/citus/conftest.py``'s ``service``,
``settings`` and ``memsvc_database_url`` (the distributed schema, emptied per
test) and the scripted chat completions server of the remember tests. Left
out: the test that kills a consolidating process once it waits for a row
lock, which it finds in the coordinator's ``pg_locks``; on Citus the wait is
on the worker holding the shard.
"""

from __future__ import annotations

from tests.ops.conftest import cli  # noqa: F401  (a fixture, found by name)
from tests.ops.test_consolidation import *  # noqa: F403
from tests.remember.conftest import chat, extractor  # noqa: F401  (fixtures, found by name)
from tests.remember.test_remember import *  # noqa: F403
from tests.remember.test_remember_valid_time import *  # noqa: F403

del test_a_process_killed_inside_a_clusters_transaction_is_resumed_by_the_next_run  # noqa: F821
