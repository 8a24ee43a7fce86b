"""How one request wants its tokens chosen and when it wants generation to stop."""

from __future__ import annotations

from typing import Literal

import msgspec

from engine.core.structured_output import StructuredOutput
from engine.errors import InvalidRequestError

_MAX_LOGIT_BIAS = 1024
"""OpenAI does not publish a cap; this one bounds a request's per-step work."""


class SamplingParams(msgspec.Struct, frozen=True, kw_only=True):
    """Per-request sampling settings; validated on construction."""

    temperature: float = 1.0
    """0 means greedy."""
    top_p: float = 1.0
    """Nucleus sampling mass in [0, 1]; 0 keeps the smallest nucleus, the top token alone."""
    top_k: int = 0
    """Keep the k most likely tokens; 0 turns it off."""
    min_p: float = 0.0
    """Drop tokens whose probability is below min_p times the top token's."""
    max_tokens: int = 16
    """Upper bound on generated tokens."""
    stop: tuple[str, ...] = ()
    """Stop strings; matched on the detokenized text, also across token boundaries."""
    stop_token_ids: tuple[int, ...] = ()
    """Extra token ids that end generation (besides the model's EOS unless ignore_eos)."""
    ignore_eos: bool = False
    """Keep generating past EOS (benchmarks)."""
    seed: int | None = None
    """Same seed, same output, whatever else runs in the batch."""
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logprobs: int | None = None
    """Return the sampled token's logprob and this many top alternatives."""
    n: int = 1
    """Number of independent completions for the prompt."""
    include_stop_str_in_output: bool = False
    logit_bias: tuple[tuple[int, float], ...] = ()
    """(token id, bias in [-100, 100]) pairs added to the logits before any other processing
    (OpenAI's ``logit_bias``); the engine checks the ids against the model's vocabulary."""
    structured: StructuredOutput | None = None
    """Constrain the output to a JSON object, a JSON schema or a grammar (constrained decoding)."""
    output_text: Literal["delta", "final"] = "delta"
    """"delta": each delta carries the text its token completes (streaming). "final": the whole
    text comes in the closing delta, decoded once; earlier deltas carry token ids only. A
    sequence with stop strings is decoded as it grows either way (the strings are matched on it).
    Both give the same text, except where the output holds bytes that are not valid UTF-8 under
    a byte-fallback tokenizer (Llama-2, Mistral): "final" is then the tokenizer's decode of the
    whole output, "delta" may count its U+FFFD replacements differently."""

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise InvalidRequestError("temperature must be >= 0", param="temperature")
        if not 0 <= self.top_p <= 1:
            raise InvalidRequestError("top_p must be in [0, 1]", param="top_p")
        if self.top_k < 0:
            raise InvalidRequestError("top_k must be >= 0", param="top_k")
        if not 0 <= self.min_p <= 1:
            raise InvalidRequestError("min_p must be in [0, 1]", param="min_p")
        if self.max_tokens < 1:
            raise InvalidRequestError("max_tokens must be >= 1", param="max_tokens")
        if self.repetition_penalty <= 0:
            raise InvalidRequestError("repetition_penalty must be > 0", param="repetition_penalty")
        if not -2 <= self.presence_penalty <= 2:
            raise InvalidRequestError("presence_penalty must be in [-2, 2]", param="presence_penalty")
        if not -2 <= self.frequency_penalty <= 2:
            raise InvalidRequestError("frequency_penalty must be in [-2, 2]", param="frequency_penalty")
        if self.logprobs is not None and not 0 <= self.logprobs <= 20:
            raise InvalidRequestError("logprobs must be in [0, 20]", param="logprobs")
        if not 1 <= self.n <= 16:
            raise InvalidRequestError("n must be in [1, 16]", param="n")
        if self.structured is not None and self.ignore_eos:
            raise InvalidRequestError(
                "ignore_eos cannot be combined with structured output", param="ignore_eos"
            )
        if len(self.logit_bias) > _MAX_LOGIT_BIAS:
            raise InvalidRequestError(
                f"logit_bias holds at most {_MAX_LOGIT_BIAS} tokens", param="logit_bias"
            )
        for token_id, bias in self.logit_bias:
            if token_id < 0 or not -100 <= bias <= 100:
                raise InvalidRequestError(
                    "logit_bias maps token ids >= 0 to biases in [-100, 100]", param="logit_bias"
                )
        if len(self.stop) > 16:
            raise InvalidRequestError("at most 16 stop strings", param="stop")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0

    @property
    def uses_penalties(self) -> bool:
        """Whether sampling reads the output so far."""
        return self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0
