from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from bench.engine.hf_generator import HFPeerConfig
from bench.serving.hf_server import BadRequest, IncrementalDetokenizer, ModelLimits, parse_completion_request

LIMITS = ModelLimits(name="tiny", vocab_size=100, max_positions=64, temperature=0.6)


def parse(**body: Any) -> Any:
    return parse_completion_request({"model": "tiny", "prompt": [1, 2, 3], **body}, LIMITS, tokenizer=None)


def test_the_benchmark_body_parses() -> None:
    req = parse(
        max_tokens=5, temperature=0.6, ignore_eos=True, stream=True, stream_options={"include_usage": True}
    )
    assert (req.prompt, req.max_tokens, req.ignore_eos, req.stream, req.include_usage) == (
        [1, 2, 3],
        5,
        True,
        True,
        True,
    )
    assert repr(req) == "CompletionRequest(prompt_len=3, max_tokens=5)"
    # Defaults: OpenAI's max_tokens 16, no streaming, EOS honoured.
    req = parse_completion_request({"prompt": [7]}, LIMITS, tokenizer=None)
    assert (req.max_tokens, req.stream, req.ignore_eos, req.include_usage) == (16, False, False, False)


@pytest.mark.parametrize(
    ("body", "param", "status"),
    [
        ({"prompt": [1, 100]}, "prompt", 400),
        ({"prompt": [-1]}, "prompt", 400),
        ({"prompt": [1.0]}, "prompt", 400),
        ({"prompt": [True]}, "prompt", 400),
        ({"prompt": [[1, 2]]}, "prompt", 400),
        ({"max_tokens": 0}, "max_tokens", 400),
        ({"max_tokens": "4"}, "max_tokens", 400),
        ({"max_tokens": 62}, "max_tokens", 400),  # 3 + 62 > 64 positions
        ({"temperature": 0.0}, "temperature", 400),
        ({"n": 2}, "n", 400),
        ({"model": "big"}, "model", 404),
        ({"stream_options": [1]}, "stream_options", 400),
    ],
)
def test_what_the_server_cannot_run_is_refused(body: dict[str, Any], param: str, status: int) -> None:
    with pytest.raises(BadRequest) as info:
        parse(**body)
    assert (info.value.param, info.value.status) == (param, status)
    assert parse(max_tokens=61).max_tokens == 61  # 3 + 61 == 64 fits


def test_a_body_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(BadRequest, match="JSON object"):
        parse_completion_request([1, 2], LIMITS, tokenizer=None)


def byte_level_tokenizer() -> Tokenizer:
    """One token per byte, so a two-byte character arrives in two steps."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tokenizer = Tokenizer(models.BPE({ch: i for i, ch in enumerate(sorted(alphabet))}, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def test_detokenizer_emits_growth_and_holds_back_a_split_character() -> None:
    tokenizer = byte_level_tokenizer()
    ids = tokenizer.encode("ab é!").ids
    assert len(ids) == 6  # "é" is two bytes
    detokenizer = IncrementalDetokenizer(tokenizer)
    deltas = [detokenizer.push([token]) for token in ids]
    assert deltas == ["a", "b", " ", "", "é", "!"]
    assert "".join(deltas) == tokenizer.decode(ids)


def test_peer_config_is_validated(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert HFPeerConfig(model_dir=tmp_path).torch_dtype == "float32"
    assert HFPeerConfig(model_dir=tmp_path, device="cuda").torch_dtype == "bfloat16"
    for bad in ({"mode": "vllm"}, {"dtype": "int8"}, {"temperature": -1.0}, {"num_blocks": 0}):
        with pytest.raises(ValueError):
            HFPeerConfig(model_dir=tmp_path, **bad)
    with pytest.raises(ValueError, match=r"no config\.json"):
        HFPeerConfig(model_dir=tmp_path / "missing")
