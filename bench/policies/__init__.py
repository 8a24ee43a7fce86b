"""Authorization benchmarks: decision cost against plain casbin."""
