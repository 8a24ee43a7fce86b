"""Gateway benchmarks: added latency, worker scaling, token verification, engine failover."""
