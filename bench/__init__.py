"""Benchmark harness: fake upstream, load generator, matrix runner (see bench/README.md)."""
