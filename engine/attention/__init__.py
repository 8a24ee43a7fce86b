"""Paged attention: the per-step metadata and the backends that read KV pages.

The torch backend is the CPU path and the oracle for GPU kernels; a Triton backend implements
the same ``forward(q, k_cache, v_cache, meta, ...)`` over the same page layout (``engine.worker.kv_cache``).
"""

from engine.attention.metadata import AttentionMetadata
from engine.attention.torch_paged import TorchPagedAttention
from engine.attention.triton_paged import TritonPagedAttention

__all__ = ["AttentionMetadata", "TorchPagedAttention", "TritonPagedAttention"]
