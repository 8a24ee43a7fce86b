"""The device side of the engine: the KV memory, the model runner, CUDA graphs, tensor-parallel ranks.

The core hands the worker a scheduled step; the worker returns sampled tokens.
"""
