"""Logprob bytes are each token's own bytes: joined, they rebuild text the single tokens cannot spell."""

from __future__ import annotations

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models

from engine.loading.demo import build_demo_files
from engine.text.token_bytes import TokenBytes


def _demo() -> HFTokenizer:
    return HFTokenizer.from_str(build_demo_files("demo-chat")["tokenizer.json"].decode())


def test_byte_level_tokens_join_into_the_utf8_of_the_text() -> None:
    tok = _demo()
    text = "naïve café 日本 <|im_end|>"
    ids = tok.encode(text, add_special_tokens=False).ids
    token_bytes = TokenBytes(tok)
    assert b"".join(bytes(token_bytes(i)) for i in ids) == text.encode()
    # A token that ends inside a character decodes to U+FFFD; its bytes are the real ones.
    partial = [i for i in ids if "\ufffd" in tok.decode([i])]
    assert partial, "the demo vocabulary splits these characters into byte tokens"
    for i in partial:
        assert bytes(token_bytes(i)) != tok.decode([i]).encode()


def test_sentencepiece_byte_fallback_pieces_are_their_byte() -> None:
    vocab = {"<unk>": 0, "<0xC3>": 1, "<0xA9>": 2, "▁caf": 3}
    tok = HFTokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    token_bytes = TokenBytes(tok)
    assert [token_bytes(i) for i in (3, 1, 2)] == [list(b" caf"), [0xC3], [0xA9]]
