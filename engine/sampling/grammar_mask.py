"""Masks the logits of constrained rows so only tokens their grammar allows can be sampled.

Per step, the bitmasks of every constrained row are filled in one call on the host (llguidance's
executor spreads the rows over its threads; a single row skips the pool), then moved to the
logits' device and unpacked there (numpy on the CPU, torch on CUDA). Only the constrained rows'
logits change: while they are a minority only their rows are touched, so an unconstrained row
pays nothing but this check; when they are most of the batch, one pass over it is cheaper than
many row-sized ones. The sampler calls it before it first reads the logits, so on CUDA the host
fills masks while the forward pass still runs.

    bitmask: [num_constrained, ceil(vocab / 32)] int32, bit (t % 32) of word (t // 32) set = t allowed
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from llguidance import LLExecutor

from engine.sampling.grammar_matcher import GrammarMatcher

__all__ = ["GrammarMask", "unpack_bits"]


def unpack_bits(words: torch.Tensor, shifts: torch.Tensor, vocab: int) -> torch.Tensor:
    """words: [n, ceil(vocab / 32)] int32, shifts: arange(32) int32 -> [n, vocab] bool (bit t set)."""
    return ((words.unsqueeze(-1) >> shifts) & 1).bool().flatten(1)[:, :vocab]


class GrammarMask:
    def __init__(self, num_threads: int | None = None) -> None:
        self._executor: LLExecutor | None = None
        self._num_threads = num_threads
        self._shifts: dict[torch.device, torch.Tensor] = {}

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
        masked_out = self._masked_out(bitmask, vocab, device)  # [num_constrained, vocab] bool
        with torch.inference_mode():  # the logits are the runner's inference tensors
            if 2 * len(rows) > logits.shape[0]:
                # Mostly constrained: one pass over the batch (free rows get an all-False mask).
                if len(rows) < logits.shape[0]:
                    full = torch.zeros(logits.shape, dtype=torch.bool, device=device)
                    full[index] = masked_out
                    masked_out = full
                logits.masked_fill_(masked_out, float("-inf"))
            elif device.type == "cpu":
                # A few constrained rows: row views, filled in place (no gather and scatter).
                for k, r in enumerate(rows):
                    logits[r].masked_fill_(masked_out[k], float("-inf"))
            else:
                logits[index] = logits[index].masked_fill(masked_out, float("-inf"))
        return index

    def _masked_out(self, bitmask: torch.Tensor, vocab: int, device: torch.device) -> torch.Tensor:
        # bitmask: [n, words] int32 on the host -> [n, vocab] bool on device, True = not allowed
        inverted = ~bitmask
        if device.type == "cpu":
            # numpy's unpackbits is one C pass; bytes are in memory order (little-endian words).
            bits = np.unpackbits(inverted.numpy().view(np.uint8), axis=1, bitorder="little")[:, :vocab]
            return torch.from_numpy(bits).view(torch.bool)
        shifts = self._shifts.get(device)
        if shifts is None:
            shifts = self._shifts[device] = torch.arange(32, dtype=torch.int32, device=device)
        return unpack_bits(inverted.to(device, non_blocking=True), shifts, vocab)

    def _pool(self) -> LLExecutor:
        if self._executor is None:
            self._executor = LLExecutor(num_threads=self._num_threads)
        return self._executor
