"""LangGraph integration benchmarks (``python -m benchmarks.langgraph.store``)."""
