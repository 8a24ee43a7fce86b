"""Audit-log benchmarks: append throughput and latency, SQLite and PostgreSQL."""
