"""LangGraph benchmarks: memsvc's integrations against LangGraph's PostgreSQL ones.

    python -m benchmarks.langgraph                 # embedded server, saver and store parts
    python -m benchmarks.langgraph.store           # the store part alone
    python -m benchmarks.langgraph.commit_latency  # a single writer's saver calls, commit on/off
    python -m benchmarks.langgraph --database-url postgresql://... --seconds 2 --rounds 7

Each part measures both sides on the same server in the same run and prints
their ratio; absolute times on a shared machine are noise.
"""
