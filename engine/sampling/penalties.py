"""Repetition (HF), frequency and presence (OpenAI) penalties, batched over the rows that use them.

- repetition_penalty ``r`` (HF ``RepetitionPenaltyLogitsProcessor``): every token that appears in the
  prompt or the output so far has its logit divided by ``r`` when it is positive, multiplied by ``r``
  otherwise. Counts do not matter, only presence.
- frequency ``f`` and presence ``p`` (OpenAI): over output tokens only,
  ``logit -= count * f + (count > 0) * p``.

Repetition is applied first, as vLLM does. A batch where no row uses a penalty is returned untouched
(the same tensor), so greedy stays bit-exact with the raw argmax.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from engine.sampling.sampler import SamplingRow


def apply_penalties(logits: torch.Tensor, rows: Sequence[SamplingRow]) -> torch.Tensor:
    # logits: [num_seqs, vocab] -> [num_seqs, vocab] (a new tensor when any row is penalised)
    uses_repetition = [row.params.repetition_penalty != 1.0 for row in rows]
    uses_additive = [
        row.params.frequency_penalty != 0.0 or row.params.presence_penalty != 0.0 for row in rows
    ]
    if not any(uses_repetition) and not any(uses_additive):
        return logits
    logits = logits.clone()
    vocab = logits.shape[1]
    if any(uses_repetition):
        seen = (
            _token_counts(
                [list(row.prompt_token_ids) + list(row.output_token_ids) for row in rows],
                vocab,
                logits.device,
            )
            > 0
        )
        penalty = _column(rows, lambda row: row.params.repetition_penalty, logits)
        penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
        logits = torch.where(seen, penalised, logits)
    if any(uses_additive):
        counts = _token_counts([row.output_token_ids for row in rows], vocab, logits.device).to(logits.dtype)
        frequency = _column(rows, lambda row: row.params.frequency_penalty, logits)
        presence = _column(rows, lambda row: row.params.presence_penalty, logits)
        logits = logits - counts * frequency - (counts > 0).to(logits.dtype) * presence
    return logits


def _token_counts(token_lists: Sequence[Sequence[int]], vocab: int, device: torch.device) -> torch.Tensor:
    # -> counts: [num_seqs, vocab] int64, counts[i, t] = occurrences of t in token_lists[i]
    # One flat host tensor and one copy to the device, whatever the batch size.
    tokens = torch.tensor(list(itertools.chain.from_iterable(token_lists)), dtype=torch.int64)
    if tokens.numel() and (int(tokens.max()) >= vocab or int(tokens.min()) < 0):
        raise ValueError(f"token id out of range for vocabulary of {vocab}")
    lengths = torch.tensor([len(t) for t in token_lists], dtype=torch.int64)
    rows = torch.repeat_interleave(torch.arange(len(token_lists)), lengths)  # [num_tokens]
    counts = torch.zeros((len(token_lists), vocab), dtype=torch.int64, device=device)
    counts.index_put_(
        (rows.to(device), tokens.to(device)),
        torch.ones(len(tokens), dtype=torch.int64, device=device),
        accumulate=True,
    )
    return counts


def _column(
    rows: Sequence[SamplingRow], value: Callable[[SamplingRow], float], like: torch.Tensor
) -> torch.Tensor:
    # -> [num_seqs, 1] of like.dtype on like.device
    return torch.tensor([value(row) for row in rows], dtype=like.dtype, device=like.device).unsqueeze(1)
