"""OpenAI's ``logit_bias``: a per-request additive bias on chosen token ids, before anything else.

It is added to the logits after the raw logprobs are read (they report the model's distribution,
as the sampler's docstring says) and before the grammar mask, the penalties, temperature and
truncation, so a bias of -100 bans a token and +100 all but forces it, as OpenAI documents.
Rows without a bias cost nothing; the batch's biases go to the device in one copy.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from engine.core.sampling_params import SamplingParams
from engine.worker.device_transfer import to_device

__all__ = ["apply_logit_bias"]


def apply_logit_bias(logits: torch.Tensor, params: Sequence[SamplingParams]) -> list[int]:
    """Add each row's bias to ``logits`` in place; returns the rows that were biased.

    logits: [num_seqs, vocab] float, one row per entry of ``params``.
    """
    biased = [i for i, p in enumerate(params) if p.logit_bias]
    if not biased:
        return []
    rows: list[int] = []
    cols: list[int] = []
    values: list[float] = []
    for i in biased:
        for token_id, bias in params[i].logit_bias:
            rows.append(i)
            cols.append(token_id)
            values.append(bias)
    device = logits.device
    index = (to_device(rows, torch.long, device), to_device(cols, torch.long, device))
    with torch.inference_mode():  # the logits are the runner's inference tensors
        logits.index_put_(index, to_device(values, logits.dtype, device), accumulate=True)
    return biased
