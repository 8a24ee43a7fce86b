"""The engine's torch-free core: sequences, the scheduler, the shared block pool and its prefix cache.

Nothing here imports torch: the scheduling and memory bookkeeping are tested exactly on any machine,
and the worker (``engine.worker``) is the only place that touches a device.
"""
