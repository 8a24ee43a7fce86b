"""Sealed-model benchmarks: sealed against plaintext load throughput."""
