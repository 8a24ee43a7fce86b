"""IncrementalDetokenizer on two tokenizers trained here: byte-level BPE and metaspace + byte fallback."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from engine.text.detokenizer import IncrementalDetokenizer

CORPUS = [
    "The engine keeps the memory of every conversation in pages.",
    "银行的数据不离开大楼。模型在本地运行，审计记录不可篡改。",
    "Strongroom 是一个网关：每个请求都带有签名令牌 and a quota.",
    "Hello, how can I help you today? 你好，今天我能帮你什么？",
    "Pages are handed to whichever model has work 并在完成后归还。",
]
MIXED = "Hello 你好，世界! The bank 银行 keeps 审计 records 不可篡改 🙂 ok."


@pytest.fixture(scope="module")
def byte_level() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>"],
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS * 4, trainer)
    return tokenizer


@pytest.fixture(scope="module")
def metaspace() -> Tokenizer:
    """Llama-2 style: metaspace pieces, bytes <0xNN> for characters outside the vocabulary."""
    trained = Tokenizer(models.BPE())
    trained.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=200, limit_alphabet=60, special_tokens=["</s>"], show_progress=False
    )
    trained.train_from_iterator(CORPUS * 4, trainer)
    vocab = trained.get_vocab()
    for byte in range(256):
        vocab.setdefault(f"<0x{byte:02X}>", len(vocab))
    raw_merges = json.loads(trained.to_str())["model"]["merges"]
    merges = [(m[0], m[1]) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in raw_merges]
    model = models.BPE(vocab=vocab, merges=merges, byte_fallback=True)
    tokenizer = Tokenizer(model)
    tokenizer.add_special_tokens(["</s>"])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    return tokenizer


def _stream(tokenizer: Tokenizer, ids: list[int], **kwargs: object) -> list[str]:
    detokenizer = IncrementalDetokenizer(tokenizer, **kwargs)  # type: ignore[arg-type]
    return [detokenizer.push(token_id) for token_id in ids] + [detokenizer.flush()]


@pytest.mark.parametrize("name", ["byte_level", "metaspace"])
def test_deltas_sum_to_the_full_decode(name: str, request: pytest.FixtureRequest) -> None:
    tokenizer: Tokenizer = request.getfixturevalue(name)
    ids = tokenizer.encode(MIXED).ids
    deltas = _stream(tokenizer, ids)
    assert "".join(deltas) == tokenizer.decode(ids) == MIXED
    assert deltas[-1] == ""  # complete text leaves nothing behind


@pytest.mark.parametrize("name", ["byte_level", "metaspace"])
def test_no_delta_contains_a_broken_character(name: str, request: pytest.FixtureRequest) -> None:
    tokenizer: Tokenizer = request.getfixturevalue(name)
    ids = tokenizer.encode(MIXED).ids
    pieces = [tokenizer.decode([i]) for i in ids]
    # The fixture must really split characters across tokens, or this test proves nothing.
    assert any("\ufffd" in piece for piece in pieces)
    for delta in _stream(tokenizer, ids):
        assert "\ufffd" not in delta
        delta.encode("utf-8")  # a lone surrogate would raise


def test_chinese_character_is_held_until_its_last_byte(byte_level: Tokenizer) -> None:
    ids = byte_level.encode("审").ids
    assert len(ids) == 3, "审 is outside the trained merges, so each UTF-8 byte is its own token"
    detokenizer = IncrementalDetokenizer(byte_level)
    assert [detokenizer.push(i) for i in ids] == ["", "", "审"]


def test_metaspace_first_token_keeps_its_space_after_a_prompt(metaspace: Tokenizer) -> None:
    prompt = metaspace.encode("Hello, how").ids
    output = metaspace.encode("Hello, how can I help").ids[len(prompt) :]
    assert metaspace.decode(output) == "can I help"  # decoding alone drops the space
    deltas = _stream(metaspace, output, prompt_token_ids=prompt)
    assert "".join(deltas) == " can I help"


def test_special_tokens_are_skipped_unless_asked(byte_level: Tokenizer) -> None:
    eos = byte_level.token_to_id("<|endoftext|>")
    assert eos is not None
    ids = [*byte_level.encode("ok").ids, eos]
    assert "".join(_stream(byte_level, ids)) == "ok"
    assert "".join(_stream(byte_level, ids, skip_special_tokens=False)) == "ok<|endoftext|>"


def test_flush_releases_an_incomplete_tail_as_replacement(byte_level: Tokenizer) -> None:
    ids = byte_level.encode("ok审").ids[:-1]
    detokenizer = IncrementalDetokenizer(byte_level)
    assert "".join(detokenizer.push(i) for i in ids) == "ok"
    assert detokenizer.flush() == byte_level.decode(ids)[2:]
    assert detokenizer.flush() == ""


@pytest.mark.parametrize("name", ["byte_level", "metaspace"])
@pytest.mark.parametrize("text", [MIXED, *CORPUS])
def test_push_final_matches_pushing_each_token_then_flushing(
    name: str, text: str, request: pytest.FixtureRequest
) -> None:
    tokenizer: Tokenizer = request.getfixturevalue(name)
    ids = tokenizer.encode(text).ids
    prompt = tokenizer.encode("Hello 你好 bank").ids
    # Byte-level BPE: any end, also one inside a character. Byte fallback decodes a run of byte
    # tokens at once, so an unfinished character at the end is compared in the next test.
    ends = (len(ids), len(ids) - 1) if name == "byte_level" else (len(ids),)
    # Every split point: some tokens streamed first (possibly ending mid-character), the rest at once.
    for cut in range(0, len(ids) + 1, 3):
        for end in ends:
            streamed = IncrementalDetokenizer(tokenizer, prompt_token_ids=prompt)
            expected = "".join(_stream(tokenizer, ids[:end], prompt_token_ids=prompt))
            head = streamed.push_many(ids[: min(cut, end)])
            assert head + streamed.push_final(ids[min(cut, end) : end]) == expected
            assert streamed.flush() == ""


@pytest.mark.parametrize("name", ["byte_level", "metaspace"])
def test_push_final_is_the_tokenizers_decode_of_the_output(name: str, request: pytest.FixtureRequest) -> None:
    tokenizer: Tokenizer = request.getfixturevalue(name)
    prompt = tokenizer.encode("Hello").ids
    context = prompt[-5:]
    ids = tokenizer.encode(MIXED).ids
    for end in range(len(ids) + 1):  # including ends inside a character
        out = ids[:end]
        want = tokenizer.decode([*context, *out])[len(tokenizer.decode(context)) :]
        assert IncrementalDetokenizer(tokenizer, prompt_token_ids=prompt).push_final(out) == want


def test_push_final_of_a_broken_character_ends_in_replacement(byte_level: Tokenizer) -> None:
    ids = byte_level.encode("ok审").ids[:-1]
    assert IncrementalDetokenizer(byte_level).push_final(ids) == byte_level.decode(ids)
    assert byte_level.decode(ids).endswith("\ufffd")


def test_repr_does_not_show_text(byte_level: Tokenizer) -> None:
    detokenizer = IncrementalDetokenizer(byte_level)
    detokenizer.push_many(byte_level.encode("secret").ids)
    assert "secret" not in repr(detokenizer)
    assert detokenizer.num_emitted_chars == len("secret")
