"""Serving benchmarks: Poisson arrivals through the real gateway and engine, against a peer server."""
