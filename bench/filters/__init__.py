"""Content-filter benchmarks: quality against Presidio, speed, worst cases, streaming."""
