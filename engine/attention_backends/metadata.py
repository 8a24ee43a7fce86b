"""What every attention layer of one model needs to know about one step's batch.

The batch is the new tokens of several sequences laid end to end::

    tokens:       [ s0 new tokens | s1 new tokens | s2 ... ]
    query_starts:  0               q1              q2  ...  num_tokens
    context_lens:  s0 computed + new, s1 ..., ...   (keys each sequence attends to)

A sequence's new tokens are the last ``query_len`` positions of its context.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["AttentionMetadata"]


@dataclass(frozen=True, slots=True)
class AttentionMetadata:
    slot_mapping: torch.Tensor
    """[num_tokens] int64: block_id * block_size + offset where each new token's K/V goes."""
    block_tables: torch.Tensor
    """[num_seqs, max_blocks] int32, padded with 0: each sequence's blocks in order."""
    context_lens: torch.Tensor
    """[num_seqs] int32."""
    query_starts: torch.Tensor
    """[num_seqs + 1] int32 (cu_seqlens_q)."""
    block_size: int
    host_query_starts: tuple[int, ...]
    """query_starts on the host, for loops that must not sync with the device."""
    host_context_lens: tuple[int, ...]

    @property
    def num_seqs(self) -> int:
        return len(self.host_context_lens)
