"""Choosing the next token: grammar masks, penalties, temperature, top-k/top-p/min-p, seeds and logprobs."""

from engine.sampling.generator import derive_seed, make_generator
from engine.sampling.grammar_compiler import GrammarCompiler
from engine.sampling.grammar_matcher import GrammarMatcher
from engine.sampling.logprobs import TokenLogprobs
from engine.sampling.sampler import Sampler, SamplerOutput, SamplingRow

__all__ = [
    "GrammarCompiler",
    "GrammarMatcher",
    "Sampler",
    "SamplerOutput",
    "SamplingRow",
    "TokenLogprobs",
    "derive_seed",
    "make_generator",
]
