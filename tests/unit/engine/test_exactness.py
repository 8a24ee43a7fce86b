"""Token-exact with HF transformers: greedy tokens identical, logits within 1e-4 (CPU, float32)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from engine.config import EngineConfig, ModelSpec
from engine.core.sampling_params import SamplingParams
from engine.core.scheduler import ScheduledSeq
from engine.llm_engine import LLMEngine
from engine.worker.model_runner import RunnerOutput

ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3")

NEW_TOKENS = 32
GREEDY = SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)
PROMPTS = {
    "short": [0, 5, 9, 33, 100],
    "mid": [0, *range(40, 56)],
    "long": [0, *range(60, 89)],
    "shared": [0, *range(40, 52), 7, 7],  # shares 12 leading tokens with "mid"
}
_reference: dict[tuple[str, str], tuple[list[int], torch.Tensor]] = {}


def reference(path: Path, arch: str, name: str) -> tuple[list[int], torch.Tensor]:
    """HF greedy tokens and the logits that chose each of them: [NEW_TOKENS, vocab]."""
    from transformers import AutoModelForCausalLM

    key = (arch, name)
    if key not in _reference:
        hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        hf.generation_config.eos_token_id = None
        prompt = torch.tensor([PROMPTS[name]])
        with torch.no_grad():
            full = hf.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False)
            logits = hf(full).logits[0, prompt.shape[1] - 1 : -1]
        _reference[key] = (full[0, prompt.shape[1] :].tolist(), logits.float())
    return _reference[key]


def block_bytes(path: Path, block_size: int) -> int:
    c = json.loads((path / "config.json").read_text())
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    return c["num_hidden_layers"] * 2 * c["num_key_value_heads"] * head_dim * 4 * block_size


def run(
    path: Path, names: list[str], *, staggered: bool = False, **options: int
) -> tuple[LLMEngine, dict[str, tuple[list[int], torch.Tensor]]]:
    config = EngineConfig(models=(ModelSpec(name="m", path=str(path)),), block_size=4, **options)  # type: ignore[arg-type]
    engine = LLMEngine(config)
    captured: dict[str, list[torch.Tensor]] = {n: [] for n in names}
    runner = engine.runners["m"]
    execute = runner.execute

    def capture(items: list[ScheduledSeq], *pending: Any) -> RunnerOutput:
        out = execute(items, *pending)
        for row, item in zip(out.logits, [i for i in items if i.is_sampling], strict=True):
            captured[item.seq.request_id].append(row.clone())
        return out

    runner.execute = capture  # type: ignore[method-assign]
    tokens: dict[str, list[int]] = {n: [] for n in names}
    for n in names:
        engine.add_request(n, "m", PROMPTS[n], GREEDY)
        if staggered:
            while engine.has_work:
                for rid, d in engine.step():
                    tokens[rid].extend(d.token_ids)
    while engine.has_work:
        for rid, d in engine.step():
            tokens[rid].extend(d.token_ids)
    return engine, {n: (tokens[n], torch.stack(captured[n])) for n in names}


def assert_matches(path: Path, arch: str, results: dict[str, tuple[list[int], torch.Tensor]]) -> None:
    for name, (tokens, logits) in results.items():
        ref_tokens, ref_logits = reference(path, arch, name)
        assert tokens == ref_tokens, f"{arch}/{name}"
        assert logits.shape == ref_logits.shape
        assert torch.allclose(logits, ref_logits, atol=1e-4, rtol=0), (logits - ref_logits).abs().max()


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_batch_of_mixed_lengths(model_dirs: dict[str, Path], arch: str) -> None:
    _, results = run(model_dirs[arch], ["short", "mid", "long"], kv_cache_bytes=1 << 20)
    assert_matches(model_dirs[arch], arch, results)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_chunked_prefill(model_dirs: dict[str, Path], arch: str) -> None:
    _, results = run(model_dirs[arch], ["long", "mid"], kv_cache_bytes=1 << 20, max_num_batched_tokens=7)
    assert_matches(model_dirs[arch], arch, results)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_prefix_cache_hits(model_dirs: dict[str, Path], arch: str) -> None:
    engine, results = run(model_dirs[arch], ["mid", "shared"], kv_cache_bytes=1 << 20, staggered=True)
    assert engine.kv_manager.num_cache_hit_tokens >= 12
    assert_matches(model_dirs[arch], arch, results)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_after_preemption(model_dirs: dict[str, Path], arch: str) -> None:
    path = model_dirs[arch]
    engine, results = run(path, ["short", "mid", "long"], kv_cache_bytes=20 * block_bytes(path, 4))
    assert engine.block_pool.num_blocks == 20
    assert engine.scheduler.num_preemptions > 0
    assert engine.block_pool.num_free_blocks == 20
    assert_matches(path, arch, results)
