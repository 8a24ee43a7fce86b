"""Turn one step's logits into the next token of every running sequence.

Public interface (stable; the model runner codes against it)::

    from engine.sampling import Sampler, SamplingRow, SamplerOutput, TokenLogprobs, make_generator

    sampler = Sampler()
    rows = [
        SamplingRow(
            params=seq.params,                       # engine.core.sampling_params.SamplingParams
            prompt_token_ids=seq.prompt_token_ids,   # Sequence[int]
            output_token_ids=seq.output_token_ids,   # Sequence[int], generated so far
            generator=seq.generator,                 # torch.Generator | None (None: unseeded)
            grammar=seq.grammar,                     # GrammarMatcher | None (structured output)
        )
        for seq in batch
    ]
    out = sampler(logits, rows)          # logits: [num_seqs, vocab] float32, one row per SamplingRow
    out.token_ids                        # torch.Tensor [num_seqs] int64, on logits.device
    out.logprobs[i]                      # TokenLogprobs | None (None unless params.logprobs is set)

    # One generator per *seeded* sequence, made once when the sequence is created:
    seq.generator = make_generator(params.seed, child_index, device)   # None when params.seed is None

Each step, the logits of every row go through, in this order (as vLLM and HF generate do):

    raw logits ──► logprobs (log_softmax of the raw logits, before anything below)
        │
        ├─ logit_bias           (rows that set one: logit[t] += bias[t], in place)
        ├─ grammar mask         (constrained rows only: disallowed tokens -> -inf, in place)
        ├─ repetition penalty   (HF: prompt + output tokens; logit>0 → /p, else ×p)
        ├─ frequency, presence  (OpenAI: output tokens only; logit -= count·f + [count>0]·p)
        │
        ├─ temperature == 0 ──► argmax                          (greedy; no randomness drawn)
        └─ / temperature ─► top-k ─► top-p ─► softmax ─► min-p ─► argmax(probs / q), q ~ Exp(1)

The sampler owns the logits it is given: the grammar mask writes into them. Logprobs are those of
the model's raw distribution (vLLM's default ``raw_logprobs`` mode; what
OpenAI reports): penalties, temperature and truncation do not change them. Greedy with no penalties
is exactly ``argmax`` of the raw logits (first index on ties).

Sampling is the exponential race: ``argmax(probs / q)`` with ``q ~ Exp(1)`` draws from ``probs``,
and it lets each row take its noise from its own generator while everything else stays batched.
A seeded row's noise depends only on its generator and the vocabulary size, so the same seed gives
the same tokens whatever else is in the batch. Unseeded rows share one draw from the sampler's own
generator. On CUDA, a batch whose sampled rows are all unseeded and untruncated takes one Triton
pass instead (``engine.kernels.gumbel_argmax``: argmax of logits / T plus Gumbel noise, the same
distribution) rather than the five full passes of the softmax route. Every generator must live on
the logits' device. Children of an ``n > 1`` request use ``derive_seed(seed, index)`` (index 0 is the seed
itself), so siblings differ but are each reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from engine.core.sampling_params import SamplingParams
from engine.sampling.grammar_mask import GrammarMask
from engine.sampling.grammar_matcher import GrammarMatcher
from engine.sampling.logit_bias import apply_logit_bias
from engine.sampling.logprobs import TokenLogprobs, gather_logprobs
from engine.sampling.penalties import apply_penalties
from engine.sampling.truncation import apply_min_p, apply_top_k_top_p
from engine.worker.device_transfer import to_device

__all__ = ["Sampler", "SamplerOutput", "SamplingRow", "TokenLogprobs"]

# q ~ Exp(1) can be exactly 0; a floor keeps probs / q finite (0 / 0 would be NaN, and argmax
# takes NaN for the maximum).
_MIN_NOISE = 1e-20


@dataclass(frozen=True, slots=True)
class SamplingRow:
    """What the sampler needs to know about one sequence for one step."""

    params: SamplingParams
    prompt_token_ids: Sequence[int]
    output_token_ids: Sequence[int]
    generator: torch.Generator | None = None
    """The sequence's own generator when it is seeded; None draws from the sampler's generator."""
    grammar: GrammarMatcher | None = None
    """The sequence's place in its grammar when its output is constrained (structured output)."""

    def __repr__(self) -> str:
        # Token ids are prompt content: log lengths only.
        return (
            f"SamplingRow(num_prompt_tokens={len(self.prompt_token_ids)}, "
            f"num_output_tokens={len(self.output_token_ids)}, seeded={self.generator is not None})"
        )


@dataclass(frozen=True, slots=True)
class SamplerOutput:
    token_ids: torch.Tensor
    """[num_seqs] int64, on the logits' device."""
    logprobs: list[TokenLogprobs | None]
    """One entry per row; None where the row did not ask for logprobs."""


def _single_pass(row: SamplingRow) -> bool:
    """Rows the one-pass Gumbel kernel serves: no per-request seed, no truncation."""
    p = row.params
    return p.is_greedy or (row.generator is None and p.top_k == 0 and p.top_p == 1.0 and p.min_p == 0.0)


class Sampler:
    """Stateless apart from the generator that unseeded rows draw from."""

    def __init__(self, generator: torch.Generator | None = None) -> None:
        self._generator = generator
        self._keys: torch.Generator | None = None
        self.grammar_mask = GrammarMask()

    def __call__(
        self, logits: torch.Tensor, rows: Sequence[SamplingRow], argmax: torch.Tensor | None = None
    ) -> SamplerOutput:
        """logits: [num_seqs, vocab] float32. argmax: [num_seqs] int64, the logits' argmax when the
        caller already has it (a decode graph computes it on the device); it is the output when
        every row is greedy and no penalty changes the logits."""
        if logits.dim() != 2 or logits.shape[0] != len(rows):
            raise ValueError(f"logits {tuple(logits.shape)} do not match {len(rows)} rows")
        if argmax is not None and argmax.shape != (len(rows),):
            raise ValueError(f"argmax {tuple(argmax.shape)} does not match {len(rows)} rows")
        num_logprobs = [row.params.logprobs for row in rows]
        raw_logprobs = None
        if any(n is not None for n in num_logprobs):
            raw_logprobs = torch.log_softmax(logits.float(), dim=-1)
        biased = apply_logit_bias(logits, [row.params for row in rows])
        constrained = self.grammar_mask.apply(logits, [row.grammar for row in rows])
        if constrained is not None and argmax is not None:
            argmax = argmax.clone()
            argmax[constrained] = logits[constrained].argmax(dim=-1)
        if biased and argmax is not None:
            argmax = argmax.clone()
            argmax[biased] = logits[biased].argmax(dim=-1)
        penalized = apply_penalties(logits, rows)
        is_greedy = [row.params.is_greedy for row in rows]
        if all(is_greedy):
            token_ids = argmax if argmax is not None and penalized is logits else penalized.argmax(dim=-1)
        elif penalized.is_cuda and all(_single_pass(row) for row in rows):
            token_ids = self._gumbel(penalized, rows, is_greedy)
        else:
            token_ids = self._sample(penalized, rows, is_greedy)
        if raw_logprobs is None:
            logprobs: list[TokenLogprobs | None] = [None] * len(rows)
        else:
            logprobs = gather_logprobs(raw_logprobs, token_ids, num_logprobs)
        return SamplerOutput(token_ids=token_ids, logprobs=logprobs)

    def prefetch_masks(self, grammars: Sequence[GrammarMatcher], device: torch.device) -> None:
        """Start filling these constrained rows' masks for the next call, off this thread
        (``GrammarMask.prefetch``); rows the next call does not have, or whose matcher moved on
        since, cost nothing but the fill."""
        self.grammar_mask.prefetch(grammars, device)

    def _gumbel(
        self, logits: torch.Tensor, rows: Sequence[SamplingRow], is_greedy: list[bool]
    ) -> torch.Tensor:
        # One Triton pass over the logits; the key comes from the sampler's generator, so an
        # engine's unseeded draws follow its configured seed like the torch path's do.
        from engine.kernels import gumbel_argmax

        temperature = [0.0 if g else row.params.temperature for row, g in zip(rows, is_greedy, strict=True)]
        seed = int(torch.randint(2**31 - 1, (1,), generator=self._host_generator()).item())
        return gumbel_argmax(logits, to_device(temperature, torch.float32, logits.device), seed)

    def _host_generator(self) -> torch.Generator:
        # Keys are drawn on the host: a device draw would be a sync per step. Seeded from the
        # device generator's seed, once, so the engine's configured seed still decides the draws.
        if self._keys is None:
            seed = self._generator.initial_seed() if self._generator is not None else torch.seed()
            self._keys = torch.Generator().manual_seed(seed)
        return self._keys

    def _sample(
        self, logits: torch.Tensor, rows: Sequence[SamplingRow], is_greedy: list[bool]
    ) -> torch.Tensor:
        # logits: [num_seqs, vocab] -> token ids: [num_seqs] int64
        device = logits.device
        greedy_ids = logits.argmax(dim=-1)
        # Greedy rows get temperature 1 here; their sampled id is replaced by the argmax below.
        temperature = to_device(
            [1.0 if g else row.params.temperature for row, g in zip(rows, is_greedy, strict=True)],
            logits.dtype,
            device,
        )
        logits = logits / temperature.unsqueeze(1)
        top_k = [row.params.top_k for row in rows]
        top_p = [row.params.top_p for row in rows]
        logits = apply_top_k_top_p(logits, top_k, top_p)
        probs = torch.softmax(logits, dim=-1)
        probs = apply_min_p(probs, [row.params.min_p for row in rows])
        noise = self._noise(probs, rows, is_greedy)
        sampled = (probs / noise).argmax(dim=-1)
        greedy_mask = to_device(is_greedy, torch.bool, device)
        return torch.where(greedy_mask, greedy_ids, sampled)

    def _noise(self, probs: torch.Tensor, rows: Sequence[SamplingRow], is_greedy: list[bool]) -> torch.Tensor:
        # probs: [num_seqs, vocab] -> q: [num_seqs, vocab], q ~ Exp(1), floored at _MIN_NOISE
        noise = torch.empty_like(probs)
        unseeded = [
            i
            for i, (row, g) in enumerate(zip(rows, is_greedy, strict=True))
            if row.generator is None and not g
        ]
        if unseeded:
            shared = torch.empty(
                (len(unseeded), probs.shape[1]), dtype=probs.dtype, device=probs.device
            ).exponential_(generator=self._generator)
            noise[to_device(unseeded, torch.long, probs.device)] = shared
        for i, (row, g) in enumerate(zip(rows, is_greedy, strict=True)):
            if g:
                noise[i] = 1.0
            elif row.generator is not None:
                noise[i].exponential_(generator=row.generator)
        return noise.clamp_min_(_MIN_NOISE)
