"""Structured output benchmarks: grammar masks, schema coverage, TPOT with constraints."""
