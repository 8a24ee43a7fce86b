"""Vocabularies for the structured-output benchmark: a demo model's, and a 150k real-like one.

No 150k-token tokenizer is on this machine and nothing may be fetched, so the large vocabulary is
built the way a byte-level BPE's looks: the 256 byte tokens, then the most frequent pre-tokens
(GPT-2's split: optional space + letters, 1-3 digits, punctuation runs, whitespace runs) of the
local Python sources, until it holds ``size`` tokens. Its token length distribution and its share
of JSON-relevant tokens (quotes, braces, digits, words with a leading space) match Qwen's/Llama-3's
closely enough for mask timing; its merges are empty, so text is tokenized by longest match.
"""

from __future__ import annotations

import json
import re
import sysconfig
from collections import Counter
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

__all__ = ["real_like_tokenizer"]

_PRETOKEN = re.compile(r" ?[A-Za-z]+| ?\d{1,3}| ?[^\sA-Za-z\d]+|\s+")
_EOS = "<|endoftext|>"


def _byte_alphabet() -> dict[int, str]:
    # GPT-2's byte -> printable character table (the ByteLevel pre-tokenizer's alphabet).
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def _corpus_counts(limit_bytes: int) -> Counter[str]:
    counts: Counter[str] = Counter()
    read = 0
    roots = {Path(sysconfig.get_paths()["stdlib"]), Path(sysconfig.get_paths()["purelib"])}
    for root in sorted(roots):
        for path in sorted(root.rglob("*.py")):
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            counts.update(_PRETOKEN.findall(text))
            read += len(text)
            if read >= limit_bytes:
                return counts
    return counts


def real_like_tokenizer(size: int = 151_643, cache_dir: Path | None = None) -> Tokenizer:
    """A byte-level BPE tokenizer with ``size`` tokens (the last one is the EOS ``<|endoftext|>``)."""
    cache_dir = cache_dir or Path.home() / ".cache" / "strongroom-bench"
    cached = cache_dir / f"real_like_{size}.json"
    if cached.exists():
        return Tokenizer.from_file(str(cached))
    alphabet = _byte_alphabet()
    vocab: dict[str, int] = {alphabet[b]: b for b in range(256)}
    for piece, _ in _corpus_counts(400_000_000).most_common():
        if len(vocab) >= size - 1:
            break
        encoded = "".join(alphabet[b] for b in piece.encode("utf-8"))
        if len(piece) > 1 and len(encoded) <= 32 and encoded not in vocab:
            vocab[encoded] = len(vocab)
    vocab[_EOS] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([_EOS])
    cache_dir.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(json.loads(tokenizer.to_str())))
    return tokenizer
