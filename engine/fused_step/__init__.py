"""The model's step on CUDA, fused: one seam between the plain model and the Triton kernels.

``engine.models`` and ``engine.layers`` are plain tensor code: they define the arithmetic and
hold the weights, and their ``forward`` is the CPU path and the reference. On CUDA the model
runner and the graph runners run ``FusedStep`` instead, which walks the same layers with the
same weights through the kernels of ``engine.kernels``, passing lazy activations (``lazy``)
between a producer kernel and the consumer that finishes its work. Every fusion rounds where
the kernels it replaces round, so the tokens are the same with any ``CudaTuning``.

Imported only on CUDA (or by tests under ``TRITON_INTERPRET``): it imports the kernels.

    step.py        FusedStep: the layer walk and the LM head
    attention.py   RoPE, the KV write and attention, folded into one kernel where they can be
    gemm.py        the matmuls, and which lazy input each takes
    norm.py        the norms, and when one is left to the GEMM after it
    lazy.py        the lazy activation types, and ``materialize``
"""

from engine.fused_step.step import FusedStep, Hidden

__all__ = ["FusedStep", "Hidden"]
