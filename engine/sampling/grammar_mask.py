"""Masks the logits of constrained rows so only tokens their grammar allows can be sampled.

Per step, the bitmasks of every constrained row are filled in one call on the host (llguidance's
executor spreads the rows over its threads; a single row skips the pool), then moved to the
logits' device and unpacked there. Only the constrained rows' logits are touched: an unconstrained
row in the same batch pays nothing but this check. The sampler calls it before reading the logits,
so on CUDA the host fills masks while the forward pass still runs.

    bitmask: [num_constrained, ceil(vocab / 32)] int32, bit (t % 32) of word (t // 32) set = t allowed
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from llguidance import LLExecutor

from engine.sampling.grammar_matcher import GrammarMatcher

__all__ = ["GrammarMask"]


class GrammarMask:
    def __init__(self, num_threads: int | None = None) -> None:
        self._executor: LLExecutor | None = None
        self._num_threads = num_threads
        self._bits: dict[torch.device, torch.Tensor] = {}

    def apply(self, logits: torch.Tensor, matchers: Sequence[GrammarMatcher | None]) -> torch.Tensor | None:
        """Set disallowed logits of constrained rows to -inf, in place. logits: [num_seqs, vocab].
        Returns the constrained rows' indices ([num_constrained] int64 on the logits' device), or
        None when no row is constrained."""
        rows = [i for i, m in enumerate(matchers) if m is not None]
        if not rows:
            return None
        vocab = logits.shape[1]
        bitmask = torch.empty((len(rows), (vocab + 31) // 32), dtype=torch.int32)
        row_bytes = bitmask.shape[1] * 4
        # (llguidance.torch wraps these two calls, but importing it compiles a kernel we don't use.)
        if len(rows) == 1:
            matchers[rows[0]].ll.unsafe_compute_mask_ptr(bitmask.data_ptr(), row_bytes)  # type: ignore[union-attr]
        else:
            pairs = [(matchers[r].ll, k) for k, r in enumerate(rows)]  # type: ignore[union-attr]
            self._pool().unsafe_compute_mask_ptr(pairs, bitmask.data_ptr(), row_bytes, len(rows))
        device = logits.device
        index = torch.tensor(rows, dtype=torch.long).to(device, non_blocking=True)
        allowed = self._unpack(bitmask.to(device, non_blocking=True), vocab)  # [num_constrained, vocab]
        with torch.inference_mode():  # the logits are the runner's inference tensors
            logits[index] = logits[index].masked_fill(~allowed, float("-inf"))
        return index

    def _unpack(self, bitmask: torch.Tensor, vocab: int) -> torch.Tensor:
        # bitmask: [n, words] int32 -> allowed: [n, vocab] bool
        bits = self._bits.get(bitmask.device)
        if bits is None:
            bits = self._bits[bitmask.device] = torch.arange(32, dtype=torch.int32, device=bitmask.device)
        return ((bitmask.unsqueeze(-1) >> bits) & 1).bool().flatten(1)[:, :vocab]

    def _pool(self) -> LLExecutor:
        if self._executor is None:
            self._executor = LLExecutor(num_threads=self._num_threads)
        return self._executor
