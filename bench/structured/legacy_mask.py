"""The grammar mask as it was before the packed kernel (engine/sampling/grammar_mask.py at
ccbde6d), kept so the benchmark prints the old path beside the new one in the same run: a fresh
pageable bitmask per step, unpacked to a bool [n, vocab] tensor on the device, then masked_fill."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from llguidance import LLExecutor

from engine.sampling.grammar_mask import unpack_bits
from engine.sampling.grammar_matcher import GrammarMatcher

__all__ = ["LegacyGrammarMask"]


class LegacyGrammarMask:
    num_prefetch_hits = 0

    def __init__(self) -> None:
        self._executor: LLExecutor | None = None
        self._shifts: dict[torch.device, torch.Tensor] = {}

    def prefetch(self, matchers: Sequence[GrammarMatcher], device: torch.device) -> None:
        """The old path filled every mask at ``apply``."""

    def wait(self) -> None:
        """Nothing runs ahead."""

    def apply(self, logits: torch.Tensor, matchers: Sequence[GrammarMatcher | None]) -> torch.Tensor | None:
        rows = [i for i, m in enumerate(matchers) if m is not None]
        if not rows:
            return None
        vocab = logits.shape[1]
        bitmask = torch.empty((len(rows), (vocab + 31) // 32), dtype=torch.int32)
        row_bytes = bitmask.shape[1] * 4
        if len(rows) == 1:
            matchers[rows[0]].ll.unsafe_compute_mask_ptr(bitmask.data_ptr(), row_bytes)  # type: ignore[union-attr]
        else:
            pairs = [(matchers[r].ll, k) for k, r in enumerate(rows)]  # type: ignore[union-attr]
            if self._executor is None:
                self._executor = LLExecutor()
            self._executor.unsafe_compute_mask_ptr(pairs, bitmask.data_ptr(), row_bytes, len(rows))
        device = logits.device
        index = torch.tensor(rows, dtype=torch.long).to(device, non_blocking=True)
        masked_out = self._masked_out(bitmask, vocab, device)
        with torch.inference_mode():
            if 2 * len(rows) > logits.shape[0]:
                if len(rows) < logits.shape[0]:
                    full = torch.zeros(logits.shape, dtype=torch.bool, device=device)
                    full[index] = masked_out
                    masked_out = full
                logits.masked_fill_(masked_out, float("-inf"))
            elif device.type == "cpu":
                for k, r in enumerate(rows):
                    logits[r].masked_fill_(masked_out[k], float("-inf"))
            else:
                logits[index] = logits[index].masked_fill(masked_out, float("-inf"))
        return index

    def _masked_out(self, bitmask: torch.Tensor, vocab: int, device: torch.device) -> torch.Tensor:
        inverted = ~bitmask
        if device.type == "cpu":
            bits = np.unpackbits(inverted.numpy().view(np.uint8), axis=1, bitorder="little")[:, :vocab]
            return torch.from_numpy(bits).view(torch.bool)
        shifts = self._shifts.get(device)
        if shifts is None:
            shifts = self._shifts[device] = torch.arange(32, dtype=torch.int32, device=device)
        return unpack_bits(inverted.to(device, non_blocking=True), shifts, vocab)
