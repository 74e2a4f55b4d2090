"""The single-node tests of ``remember`` and ``consolidate``, run on the cluster.

Imported here, they run with ``tests/citus/conftest.py``'s ``service``,
``settings`` and ``memsvc_database_url`` (the distributed schema, emptied per
test) and the scripted chat completions server of the remember tests. Left
out: the test that kills a consolidating process once it waits for a row
lock, which it finds in the coordinator's ``pg_locks``; on Citus the wait is
on the worker holding the shard. Also left out, for CI time: the tests of
what happens before the store is reached or whatever store it is (the
model's answers checked, HTTP failures, input refused, the extractor
chosen, LangChain messages, the blocking client, the LLM summarizer and the
command line), which the single-node run covers.
"""

from __future__ import annotations

from tests.ops.conftest import cli  # noqa: F401  (a fixture, found by name)
from tests.ops.test_consolidation import *  # noqa: F403
from tests.remember.conftest import chat, extractor  # noqa: F401  (fixtures, found by name)
from tests.remember.test_remember import *  # noqa: F403
from tests.remember.test_remember_valid_time import *  # noqa: F403

del test_a_process_killed_inside_a_clusters_transaction_is_resumed_by_the_next_run  # noqa: F821

# Before the store, or the same on any store (see the module docstring).
del test_an_answer_that_is_not_json_applies_nothing  # noqa: F821
del test_too_many_operations_refuse_the_answer_whole  # noqa: F821
del test_a_tool_call_only_server_works_end_to_end  # noqa: F821
del test_langchain_messages_are_remembered  # noqa: F821
del test_bad_input_is_refused_before_anything_is_asked_or_written  # noqa: F821
del test_the_default_extractor_comes_from_open_or_from_memsvc_extractor  # noqa: F821
del test_the_blocking_client_remembers  # noqa: F821
del test_an_endpoint_failure_applies_nothing_and_a_retry_succeeds  # noqa: F821
del test_messages_stating_nothing_are_recorded_after_one_model_call  # noqa: F821
del test_facts_all_refused_leave_the_messages_pending  # noqa: F821
del test_the_openai_chat_summarizer_writes_the_summaries  # noqa: F821
del test_the_consolidate_command_runs_it_on_a_scope  # noqa: F821
