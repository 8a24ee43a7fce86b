"""Engine benchmarks: decode, throughput, kernels and graphs on the GPU, host profiles, first token."""
