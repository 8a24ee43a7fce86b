"""Logprobs reported to the client: the sampled token's and the top-N alternatives'.

They are read off the model's raw distribution, ``log_softmax(logits)`` before penalties,
temperature and truncation, which is what OpenAI reports and vLLM's default ``raw_logprobs`` mode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class TokenLogprobs:
    token_id: int
    logprob: float
    """log P(token_id) under the raw model distribution."""
    rank: int
    """1 for the most likely token; 1 + the number of tokens strictly more likely."""
    top: tuple[tuple[int, float], ...]
    """The N most likely (token id, logprob), most likely first; N = params.logprobs."""


def gather_logprobs(
    logprobs: torch.Tensor, token_ids: torch.Tensor, num_logprobs: Sequence[int | None]
) -> list[TokenLogprobs | None]:
    # logprobs: [num_seqs, vocab] float32 (raw log_softmax); token_ids: [num_seqs] int64
    wanted = [i for i, n in enumerate(num_logprobs) if n is not None]
    rows = torch.tensor(wanted, device=logprobs.device)
    chosen = logprobs[rows]  # [num_wanted, vocab]
    sampled = chosen.gather(1, token_ids[rows].unsqueeze(1))  # [num_wanted, 1]
    ranks = (chosen > sampled).sum(dim=1) + 1  # [num_wanted]
    max_n = max(n for n in num_logprobs if n is not None)
    top_values, top_ids = chosen.topk(max_n, dim=-1) if max_n else (chosen[:, :0], chosen[:, :0].long())
    # One device-to-host copy for everything the client sees.
    sampled_list = sampled.squeeze(1).tolist()
    ranks_list = ranks.tolist()
    ids_list = token_ids[rows].tolist()
    top_values_list = top_values.tolist()
    top_ids_list = top_ids.tolist()
    result: list[TokenLogprobs | None] = [None] * len(num_logprobs)
    for j, i in enumerate(wanted):
        n = num_logprobs[i]
        assert n is not None
        result[i] = TokenLogprobs(
            token_id=ids_list[j],
            logprob=sampled_list[j],
            rank=ranks_list[j],
            top=tuple(zip(top_ids_list[j][:n], top_values_list[j][:n], strict=True)),
        )
    return result
