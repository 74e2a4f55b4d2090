"""Memory quality benchmark (issue 29): python -m benchmarks.memory_quality."""
