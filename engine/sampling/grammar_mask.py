"""Masks the logits of constrained rows so only tokens their grammar allows can be sampled.

Per step, the bitmasks of every constrained row are filled in one call on the host (llguidance's
executor spreads the rows over its threads; a single row skips the pool) into a reused host
buffer (pinned on CUDA), and applied to the logits in place without unpacking them on the device:

    CUDA: one non-blocking copy of the words and of each mask's logits row from pinned memory,
          then one Triton pass (``engine.kernels.token_bitmask``) writing -inf where a bit is clear
    CPU:  numpy unpacks the inverted words (one C pass) and each constrained row is filled in place

A fill can start early, off the step loop's thread: ``prefetch`` takes the matchers the next step
will likely constrain as soon as their last tokens are consumed, so the host fills while the loop
schedules and queues the forward pass. ``apply`` uses a prefetched mask only for a matcher that is
still where it was when the prefetch began (same object, same ``num_accepted``); any other row is
filled then and there, so the masks are exactly those of a fill at ``apply``. A matcher waits for
a fill that reads it before it consumes a token (``GrammarMatcher.accept``).

    bitmask: [num_masks, ceil(vocab / 32)] int32, bit (t % 32) of word (t // 32) set = t allowed
    rows:    [num_masks] int32, the logits row of each mask (-1: prefetched, not in this batch)
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import torch
from llguidance import LLExecutor

from engine.sampling.grammar_matcher import GrammarMatcher
from engine.sampling.mask_buffer import MaskBuffer

__all__ = ["GrammarMask", "unpack_bits"]


def unpack_bits(words: torch.Tensor, shifts: torch.Tensor, vocab: int) -> torch.Tensor:
    """words: [n, ceil(vocab / 32)] int32, shifts: arange(32) int32 -> [n, vocab] bool (bit t set).
    The reference the packed path is tested and benchmarked against."""
    return ((words.unsqueeze(-1) >> shifts) & 1).bool().flatten(1)[:, :vocab]


class GrammarMask:
    def __init__(self, num_threads: int | None = None) -> None:
        self._executor: LLExecutor | None = None
        self._num_threads = num_threads
        self._buffers: dict[tuple[torch.device, int], MaskBuffer] = {}
        self._worker: ThreadPoolExecutor | None = None
        self._prefetched: list[tuple[GrammarMatcher, int]] = []
        """(matcher, num_accepted when its fill began), one per row of ``_prefetch_buffer`` from 0."""
        self._prefetch_buffer: MaskBuffer | None = None
        self._pending: Future[None] | None = None
        self.num_prefetch_hits = 0
        """Masks ``apply`` took from a prefetch rather than filling them itself."""

    def prefetch(self, matchers: Sequence[GrammarMatcher], device: torch.device) -> None:
        """Start filling these matchers' masks on a worker thread, for the next ``apply``."""
        self.wait()
        if not matchers:
            return
        buffer = self._buffer(device, matchers[0].vocab_size)
        buffer.reserve(len(matchers))
        self._prefetched = [(m, m.num_accepted) for m in matchers]
        self._prefetch_buffer = buffer
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grammar-mask")
        future = self._worker.submit(self._fill, buffer, list(matchers), 0)
        self._pending = future
        for m in matchers:
            m.reading = future

    def wait(self) -> None:
        """Until a prefetch under way has finished (its masks stay usable)."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()

    def apply(self, logits: torch.Tensor, matchers: Sequence[GrammarMatcher | None]) -> torch.Tensor | None:
        """Set disallowed logits of constrained rows to -inf, in place. logits: [num_seqs, vocab].
        Returns the constrained rows' indices ([num_constrained] int64 on the logits' device), or
        None when no row is constrained."""
        rows = [i for i, m in enumerate(matchers) if m is not None]
        if not rows:
            return None
        self.wait()
        buffer = self._buffer(logits.device, logits.shape[1])
        target = self._targets(buffer, rows, matchers)
        index = torch.tensor(rows, dtype=torch.long)
        with torch.inference_mode():  # the logits are the runner's inference tensors
            if logits.is_cuda:
                buffer.apply_on_device(logits, target)
                return index.pin_memory().to(logits.device, non_blocking=True)
            self._apply_on_host(logits, buffer, target)
        return index

    def _targets(
        self, buffer: MaskBuffer, rows: list[int], matchers: Sequence[GrammarMatcher | None]
    ) -> list[int]:
        """Fill what no prefetch filled; the logits row of each buffer row (-1: none)."""
        prefetched = self._prefetched if self._prefetch_buffer is buffer else []
        self._prefetched, self._prefetch_buffer = [], None
        slot = {id(m): k for k, (m, n) in enumerate(prefetched) if m.num_accepted == n}
        target = [-1] * len(prefetched)  # a stale or unused prefetched row is skipped
        missing: list[tuple[int, GrammarMatcher]] = []
        for r in rows:
            m = matchers[r]
            assert m is not None
            k = slot.pop(id(m), None)
            if k is None:
                missing.append((r, m))
            else:
                target[k] = r
                self.num_prefetch_hits += 1
        if missing:
            first = len(target)
            buffer.reserve(first + len(missing))
            self._fill(buffer, [m for _, m in missing], first)
            target.extend(r for r, _ in missing)
        return target

    def _fill(self, buffer: MaskBuffer, matchers: list[GrammarMatcher], first: int) -> None:
        # (llguidance.torch wraps these two calls, but importing it compiles a kernel we don't use.)
        buffer.wait_copied()
        ptr, row_bytes = buffer.host_row_ptr(first), buffer.row_bytes
        if len(matchers) == 1:
            matchers[0].ll.unsafe_compute_mask_ptr(ptr, row_bytes)
        else:
            pairs = [(m.ll, k) for k, m in enumerate(matchers)]
            self._pool().unsafe_compute_mask_ptr(pairs, ptr, row_bytes, len(matchers))

    @staticmethod
    def _apply_on_host(logits: torch.Tensor, buffer: MaskBuffer, target: list[int]) -> None:
        # numpy's unpackbits is one C pass; bytes are in memory order (little-endian words).
        vocab = logits.shape[1]
        words = buffer.host[: len(target)].numpy()
        masked_out = torch.from_numpy(
            np.unpackbits((~words).view(np.uint8), axis=1, bitorder="little")[:, :vocab]
        ).view(torch.bool)  # [num_masks, vocab], True = not allowed
        first, n = target[0], len(target)
        if first >= 0 and target == list(range(first, first + n)):
            # The usual batch: the masks' rows are one run of the logits' rows, one pass.
            logits[first : first + n].masked_fill_(masked_out, float("-inf"))
            return
        for k, r in enumerate(target):
            if r >= 0:
                logits[r].masked_fill_(masked_out[k], float("-inf"))

    def _buffer(self, device: torch.device, vocab: int) -> MaskBuffer:
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        key = (device, vocab)
        buffer = self._buffers.get(key)
        if buffer is None:
            buffer = self._buffers[key] = MaskBuffer(device, vocab)
        return buffer

    def _pool(self) -> LLExecutor:
        if self._executor is None:
            self._executor = LLExecutor(num_threads=self._num_threads)
        return self._executor
