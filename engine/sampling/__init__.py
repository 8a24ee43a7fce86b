"""Choosing the next token: penalties, temperature, top-k/top-p/min-p, seeds and logprobs."""

from engine.sampling.generator import derive_seed, make_generator
from engine.sampling.logprobs import TokenLogprobs
from engine.sampling.sampler import Sampler, SamplerOutput, SamplingRow

__all__ = ["Sampler", "SamplerOutput", "SamplingRow", "TokenLogprobs", "derive_seed", "make_generator"]
