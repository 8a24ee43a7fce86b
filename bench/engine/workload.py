"""nano-vllm's offline throughput workload, generated exactly as its bench.py does.

nano-vllm (bench.py)::

    seed(0)
    prompt_token_ids = [[randint(0, 10000) for _ in range(randint(100, max_input_len))]
                        for _ in range(num_seqs)]
    sampling_params = [SamplingParams(temperature=0.6, ignore_eos=True,
                                      max_tokens=randint(100, max_ouput_len)) for _ in range(num_seqs)]

with num_seqs = 256 and both maxima 1024: 142,827 prompt and 133,966 output tokens. All prompts are
drawn before any max_tokens, from one ``random.Random(0)`` stream, so the order above matters.

``scale < 1`` shrinks the workload for CPU runs: the first ``ceil(256 * scale)`` requests, each prompt
and max_tokens cut to ``max(1, round(length * scale))``. The scaled workload is a pure function of the
full one, so every scale is reproducible.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

TEMPERATURE = 0.6


@dataclass(frozen=True, slots=True)
class Workload:
    prompt_token_ids: list[list[int]]
    max_tokens: list[int]
    temperature: float = TEMPERATURE

    @property
    def num_requests(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return sum(len(prompt) for prompt in self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        """Every request runs to max_tokens (ignore_eos)."""
        return sum(self.max_tokens)

    def scaled(self, scale: float) -> Workload:
        if not 0 < scale <= 1:
            raise ValueError("scale must be in (0, 1]")
        if scale == 1:
            return self
        num_requests = math.ceil(self.num_requests * scale)
        return Workload(
            prompt_token_ids=[
                prompt[: max(1, round(len(prompt) * scale))]
                for prompt in self.prompt_token_ids[:num_requests]
            ],
            max_tokens=[max(1, round(m * scale)) for m in self.max_tokens[:num_requests]],
            temperature=self.temperature,
        )

    def warm_up(self, max_tokens: int = 8) -> Workload:
        """An untimed pass with this workload's prefill shapes, so no kernel variant compiles in
        the timed one (a short prompt alone left the attention variants of longer prefills to
        it). Reversed prompts: the timed run finds none of their blocks in the prefix cache."""
        return Workload(
            prompt_token_ids=[prompt[::-1] for prompt in self.prompt_token_ids],
            max_tokens=[min(m, max_tokens) for m in self.max_tokens],
            temperature=self.temperature,
        )


def nano_vllm_workload(
    *, num_seqs: int = 256, max_input_len: int = 1024, max_output_len: int = 1024, seed: int = 0
) -> Workload:
    rng = random.Random(seed)
    prompt_token_ids = [
        [rng.randint(0, 10000) for _ in range(rng.randint(100, max_input_len))] for _ in range(num_seqs)
    ]
    max_tokens = [rng.randint(100, max_output_len) for _ in range(num_seqs)]
    return Workload(prompt_token_ids=prompt_token_ids, max_tokens=max_tokens)
