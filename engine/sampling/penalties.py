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
from collections.abc import Callable, Iterable, Sequence
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
                [itertools.chain(row.prompt_token_ids, row.output_token_ids) for row in rows],
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


def _token_counts(token_lists: Sequence[Iterable[int]], vocab: int, device: torch.device) -> torch.Tensor:
    # -> counts: [num_seqs, vocab] int64, counts[i, t] = occurrences of t in token_lists[i]
    # One flat host tensor, one copy to the device and one scatter, whatever the batch size.
    lengths: list[int] = []
    flat: list[int] = []
    for tokens in token_lists:
        before = len(flat)
        flat.extend(tokens)
        lengths.append(len(flat) - before)
    tokens_t = torch.tensor(flat, dtype=torch.int64)
    if tokens_t.numel() and (int(tokens_t.max()) >= vocab or int(tokens_t.min()) < 0):
        raise ValueError(f"token id out of range for vocabulary of {vocab}")
    rows = torch.repeat_interleave(torch.arange(len(token_lists)), torch.tensor(lengths, dtype=torch.int64))
    index = (rows * vocab + tokens_t).to(device)  # [num_tokens] into the flattened counts
    counts = torch.zeros(len(token_lists) * vocab, dtype=torch.int64, device=device)
    counts.scatter_add_(0, index, torch.ones_like(index))
    return counts.view(len(token_lists), vocab)


def _column(
    rows: Sequence[SamplingRow], value: Callable[[SamplingRow], float], like: torch.Tensor
) -> torch.Tensor:
    # -> [num_seqs, 1] of like.dtype on like.device
    return torch.tensor([value(row) for row in rows], dtype=like.dtype, device=like.device).unsqueeze(1)
