"""Attention backends: how the attention layer reads and writes the paged KV cache.

Attention lives in three places, by role:

    engine/layers/attention.py        the layer: holds its views of the KV pool, calls a backend
    engine/attention_backends/        the backends: the torch one (CPU, and the oracle) and the
                                      Triton one (CUDA), behind the same store_kv/forward
    engine/kernels/paged_attention.py the Triton kernel the Triton backend launches

Both backends read the same page layout (``engine.worker.kv_cache``) and the same per-step
``AttentionMetadata``.
"""

from engine.attention_backends.metadata import AttentionMetadata
from engine.attention_backends.torch_backend import TorchAttentionBackend
from engine.attention_backends.triton_backend import TritonAttentionBackend

__all__ = ["AttentionMetadata", "TorchAttentionBackend", "TritonAttentionBackend"]
