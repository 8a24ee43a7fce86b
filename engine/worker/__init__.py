"""The device side of the engine: the KV memory, the model runner, CUDA graphs, tensor-parallel ranks.

The core hands the worker a scheduled step; the worker returns sampled tokens. With
``tensor_parallel_size`` > 1, ``rank_group`` (rank 0) starts ``rank_worker`` processes, joined by
``distributed``, and sends them each step as a ``step_plan`` through the ``plan_channel``.
"""
