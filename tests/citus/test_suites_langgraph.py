"""LangGraph's saver conformance suite and the store tests, run on the cluster."""

from __future__ import annotations

from tests.integrations.test_langgraph_saver import (  # noqa: F401
    test_conformance_suite_passes_with_every_capability,
)
from tests.integrations.test_langgraph_store import *  # noqa: F403
