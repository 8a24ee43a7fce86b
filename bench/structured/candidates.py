"""The three grammar libraries behind one small interface, for the structured-output benchmark.

Each candidate compiles a JSON schema (None: any JSON object) for one vocabulary, makes a matcher
per sequence, fills a batch's bitmask (``[batch, ceil(vocab / 32)]`` int32, bit set = allowed) in
the library's own batched call where it has one, and advances a matcher by a token.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

import torch
from tokenizers import Tokenizer

__all__ = ["CANDIDATES", "Candidate", "token_bytes"]


def token_bytes(tokenizer: Tokenizer) -> list[bytes]:
    """Each token id's bytes (byte-level vocabularies; special tokens as their text)."""
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    out = [b""] * (max(vocab.values()) + 1)
    for i in range(len(out)):
        out[i] = tokenizer.decode([i], skip_special_tokens=False).encode("utf-8", "surrogatepass")
    return out


class Candidate(Protocol):
    name: str

    def compile(self, schema: dict[str, Any] | None) -> Any: ...
    def matcher(self, compiled: Any) -> Any: ...
    def fill(self, matchers: list[Any], bitmask: torch.Tensor) -> None: ...
    def accept(self, matcher: Any, token_id: int) -> bool: ...


class LLGuidance:
    name = "llguidance"

    def __init__(self, tokenizer: Tokenizer, eos_id: int, threads: int) -> None:
        import llguidance

        self._ll = llguidance
        self._tok = llguidance.LLTokenizer(
            tokenizer.to_str(), n_vocab=tokenizer.get_vocab_size(), eos_token=eos_id
        )
        self._executor = llguidance.LLExecutor(num_threads=threads)

    def compile(self, schema: dict[str, Any] | None) -> Any:
        grammar = self._ll.LLMatcher.grammar_from_json_schema(
            json.dumps(schema if schema is not None else {"type": "object"}),
            defaults={"whitespace_flexible": False},
        )
        error = self._ll.LLMatcher.validate_grammar(grammar, self._tok)
        if error:
            raise ValueError(error)
        return grammar

    def matcher(self, compiled: Any) -> Any:
        return self._ll.LLMatcher(self._tok, compiled)

    def fill(self, matchers: list[Any], bitmask: torch.Tensor) -> None:
        from llguidance.torch import fill_next_token_bitmask, fill_next_token_bitmask_par

        if len(matchers) == 1:
            fill_next_token_bitmask(matchers[0], bitmask, 0)
        else:
            fill_next_token_bitmask_par(self._executor, [(m, i) for i, m in enumerate(matchers)], bitmask)

    def accept(self, matcher: Any, token_id: int) -> bool:
        return bool(matcher.consume_token(token_id)) and not matcher.is_error()


class XGrammar:
    name = "xgrammar"

    def __init__(self, tokenizer: Tokenizer, eos_id: int, threads: int) -> None:
        import xgrammar

        self._xg = xgrammar
        vocab = [b.decode("latin-1") for b in token_bytes(tokenizer)]  # RAW: one char per byte
        info = xgrammar.TokenizerInfo(
            [bytes(v, "latin-1") for v in vocab],  # type: ignore[arg-type]
            vocab_type=xgrammar.VocabType.RAW,
            vocab_size=tokenizer.get_vocab_size(),
            stop_token_ids=[eos_id],
        )
        self._compiler = xgrammar.GrammarCompiler(info, max_threads=threads)
        self._batch = xgrammar.BatchGrammarMatcher(max_threads=threads)

    def compile(self, schema: dict[str, Any] | None) -> Any:
        if schema is None:
            return self._compiler.compile_json_schema(
                '{"type": "object"}', any_whitespace=False, separators=(",", ":")
            )
        return self._compiler.compile_json_schema(
            json.dumps(schema), any_whitespace=False, strict_mode=True, separators=(",", ":")
        )

    def matcher(self, compiled: Any) -> Any:
        return self._xg.GrammarMatcher(compiled)

    def fill(self, matchers: list[Any], bitmask: torch.Tensor) -> None:
        if len(matchers) == 1:
            matchers[0].fill_next_token_bitmask(bitmask, 0)
        else:
            self._batch.batch_fill_next_token_bitmask(matchers, bitmask)

    def accept(self, matcher: Any, token_id: int) -> bool:
        return bool(matcher.accept_token(token_id))


class OutlinesCore:
    name = "outlines-core"

    def __init__(self, tokenizer: Tokenizer, eos_id: int, threads: int) -> None:
        import outlines_core

        self._oc = outlines_core
        mapping: dict[bytes, list[int]] = {}
        for i, b in enumerate(token_bytes(tokenizer)):
            if i != eos_id and b:
                mapping.setdefault(b, []).append(i)
        self._vocab = outlines_core.Vocabulary(eos_id, mapping)

    def compile(self, schema: dict[str, Any] | None) -> Any:
        regex = self._oc.json_schema.build_regex_from_schema(
            json.dumps(schema if schema is not None else {"type": "object"})
        )
        return self._oc.Index(regex, self._vocab)

    def matcher(self, compiled: Any) -> Any:
        return self._oc.Guide(compiled)

    def fill(self, matchers: list[Any], bitmask: torch.Tensor) -> None:
        # No batched call: one write per sequence.
        for i, guide in enumerate(matchers):
            row = bitmask[i]
            guide.write_mask_into(row.data_ptr(), row.numel(), row.element_size())

    def accept(self, matcher: Any, token_id: int) -> bool:
        try:
            matcher.advance(token_id)
        except ValueError:
            return False
        return True


CANDIDATES: dict[str, type[LLGuidance] | type[XGrammar] | type[OutlinesCore]] = {
    c.name: c for c in (LLGuidance, XGrammar, OutlinesCore)
}
