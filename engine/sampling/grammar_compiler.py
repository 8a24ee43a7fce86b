"""Compiles a request's ``StructuredOutput`` for one model's vocabulary, once per schema.

Built on llguidance (see bench/BENCHMARKS.md, "Structured output", for why): its tokenizer view
is made once per model from the model's own tokenizer.json, and a compiled grammar is validated
against it (an invalid schema is an ``InvalidRequestError`` naming the spec's ``param``, raised
before anything is queued) and kept in a bounded LRU keyed by the schema's hash. Each sequence
then gets its own ``GrammarMatcher`` from the compiled grammar.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable

import llguidance

from engine.core.structured_output import StructuredOutput
from engine.errors import InvalidRequestError
from engine.sampling.grammar_matcher import GrammarMatcher

__all__ = ["GrammarCompiler"]

_JSON_OBJECT = '{"type": "object"}'


class GrammarCompiler:
    """One per hosted model. Not thread-safe (the engine step loop owns it)."""

    def __init__(
        self, tokenizer_json: str, vocab_size: int, eos_token_ids: Iterable[int], *, cache_size: int = 256
    ) -> None:
        self._tokenizer = llguidance.LLTokenizer(
            tokenizer_json, n_vocab=vocab_size, eos_token=sorted(eos_token_ids)
        )
        self.vocab_size = vocab_size
        self._cache: OrderedDict[str, str] = OrderedDict()
        self._cache_size = cache_size

    @property
    def num_cached(self) -> int:
        """Compiled grammars kept, one per distinct schema (``StructuredOutput.key``)."""
        return len(self._cache)

    def matcher(self, spec: StructuredOutput) -> GrammarMatcher:
        """A fresh matcher for one sequence; compiles ``spec`` unless its grammar is cached."""
        grammar = self._compiled(spec)
        return GrammarMatcher(llguidance.LLMatcher(self._tokenizer, grammar, log_level=0), self.vocab_size)

    def _compiled(self, spec: StructuredOutput) -> str:
        key = spec.key
        grammar = self._cache.get(key)
        if grammar is not None:
            self._cache.move_to_end(key)
            return grammar
        grammar = _grammar(spec)
        is_error, problems = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, self._tokenizer)
        if is_error:
            raise InvalidRequestError(_message(spec, problems), param=spec.param)
        self._cache[key] = grammar
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return grammar


def _grammar(spec: StructuredOutput) -> str:
    try:
        if spec.kind == "lark":
            assert spec.grammar is not None  # checked by StructuredOutput
            return llguidance.LLMatcher.grammar_from_lark(spec.grammar)
        schema = spec.schema if spec.kind == "json_schema" else _JSON_OBJECT
        assert schema is not None
        json.loads(schema)
        # Compact separators: no whitespace a random model could fill until max_tokens.
        return llguidance.LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": False})
    except (ValueError, TypeError) as exc:
        raise InvalidRequestError(_message(spec, [str(exc)]), param=spec.param) from exc


def _message(spec: StructuredOutput, problems: list[str]) -> str:
    what = {"json_schema": "JSON schema", "json_object": "JSON object grammar", "lark": "grammar"}[spec.kind]
    detail = "; ".join(p.strip() for p in problems if p.strip())[:500] or "not supported"
    return f"invalid {what}: {detail}"
