"""Text at the end ("final") against text token by token ("delta"), over random outputs and endings."""

from __future__ import annotations

import random

import msgspec
import pytest
import torch

from engine.core.sampling_params import SamplingParams
from engine.core.sequence import Sequence, SequenceStatus
from engine.sequence_output import SequenceOutput
from engine.text.tokenizer import Tokenizer

from .conftest import build_tokenizer


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    """Byte-level BPE with special tokens: random ids end mid-character often."""
    return Tokenizer(build_tokenizer(), eos_token="</s>")


def _text(
    tokenizer: Tokenizer, params: SamplingParams, prompt: list[int], ids: list[int], abort_at: int | None
) -> tuple[str, str]:
    seq = Sequence("r", "m", prompt, params)
    eos = frozenset({tokenizer.eos_token_id}) if tokenizer.eos_token_id is not None else frozenset()
    out = SequenceOutput(seq, tokenizer, eos_token_ids=eos, max_model_len=4096, device=torch.device("cpu"))
    text = ""
    for i, token_id in enumerate(ids):
        seq.append_token(token_id)
        delta, status = out.on_token(token_id, None)
        text += delta.text
        if status is not None:
            return text, status.value
        if i == abort_at:
            return text + out.final(SequenceStatus.FINISHED_ABORTED).text, "abort"
    return text + out.final(SequenceStatus.FINISHED_LENGTH).text, "outgrown"  # ended by the pool


def test_both_text_modes_end_on_the_same_text(tokenizer: Tokenizer) -> None:
    rng = random.Random(0)
    vocab = tokenizer.hf.get_vocab_size()
    endings: set[str] = set()
    for _ in range(400):
        prompt = [rng.randrange(vocab) for _ in range(rng.randrange(1, 8))]
        ids = [rng.randrange(vocab) for _ in range(30)]
        params = SamplingParams(
            max_tokens=rng.randrange(1, 40),
            stop_token_ids=tuple(rng.sample(range(vocab), rng.choice([0, 3, 30]))),
            include_stop_str_in_output=rng.random() < 0.5,
            ignore_eos=rng.random() < 0.3,
        )
        abort_at = rng.randrange(30) if rng.random() < 0.3 else None
        delta = _text(tokenizer, params, prompt, ids, abort_at)
        final = _text(tokenizer, msgspec.structs.replace(params, output_text="final"), prompt, ids, abort_at)
        assert final == delta, (prompt, ids, params, abort_at)
        endings.add(delta[1])
    assert endings == {"length", "stop", "abort", "outgrown"}
