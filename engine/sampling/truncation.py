"""Top-k, top-p (nucleus) and min-p: which tokens stay in the running for one row.

Semantics follow HF's warpers, applied in HF's order (top-k, then top-p on what top-k kept, then
min-p):

- top-k ``k > 0``: keep tokens whose logit is >= the k-th largest (ties at the boundary stay).
- top-p ``p < 1``: keep the smallest set of most likely tokens whose probability sums to >= p;
  the most likely token always stays.
- min-p ``m > 0``: drop tokens whose probability is below ``m`` times the top token's. The ratio
  does not change under renormalisation, so applying it to the truncated distribution is the same
  as applying it to the full one and intersecting.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from engine.worker.device_transfer import to_device


def apply_top_k_top_p(logits: torch.Tensor, top_k: Sequence[int], top_p: Sequence[float]) -> torch.Tensor:
    # logits: [num_seqs, vocab] -> [num_seqs, vocab], dropped tokens set to -inf
    uses_k = any(0 < k < logits.shape[1] for k in top_k)
    uses_p = any(p < 1.0 for p in top_p)
    if not uses_k and not uses_p:
        return logits
    vocab = logits.shape[1]
    device = logits.device
    sorted_logits, order = logits.sort(dim=-1, descending=False)
    # sorted_logits, order: [num_seqs, vocab], ascending, so the most likely token is last
    if uses_k:
        k = to_device([k if 0 < k < vocab else vocab for k in top_k], torch.long, device)
        kth_largest = sorted_logits.gather(1, (vocab - k).unsqueeze(1))  # [num_seqs, 1]
        sorted_logits = sorted_logits.masked_fill(sorted_logits < kth_largest, float("-inf"))
    if uses_p:
        p = to_device(list(top_p), sorted_logits.dtype, device).unsqueeze(1)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)  # [num_seqs, vocab]
        # Mass strictly below a token (ascending) <= 1 - p means the tokens above it already reach p.
        drop = cumulative <= 1 - p
        drop[:, -1] = False
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(1, order, sorted_logits)


def apply_min_p(probs: torch.Tensor, min_p: Sequence[float]) -> torch.Tensor:
    # probs: [num_seqs, vocab] -> [num_seqs, vocab], dropped tokens set to 0 (not renormalised:
    # the exponential race samples proportionally to unnormalised weights)
    if not any(m > 0 for m in min_p):
        return probs
    m = to_device(list(min_p), probs.dtype, probs.device).unsqueeze(1)
    threshold = probs.amax(dim=-1, keepdim=True) * m  # [num_seqs, 1]
    return probs.masked_fill(probs < threshold, 0.0)
