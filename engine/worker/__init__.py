"""The device side of the engine: the KV memory, the model runner, CUDA graphs, parallel ranks.

The core hands the worker a scheduled step; the worker returns sampled tokens. With
``tensor_parallel_size`` or ``pipeline_parallel_size`` > 1, ``rank_group`` (rank 0) starts
``rank_worker`` processes (or waits for those another host starts, ``rank_environment``), joined
by ``distributed``, and sends them each step as a ``step_plan`` through the ``plan_channel``; a
pipeline stage runs its layers over micro-batches in ``pipeline_runner``.
"""
