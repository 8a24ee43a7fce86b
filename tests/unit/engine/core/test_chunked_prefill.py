"""Chunked prefill on CPU: a long prompt arriving beside decoding streams changes no token and
never costs a stream its token of a step.

Several models share the pool; the streams decode while a long prompt arrives and is prefilled
over many steps (with other sizes of chunk and budget), then a prompt sharing its prefix hits the
prefix cache. The reference is the same arrivals with the whole prompt in one step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from engine.config import EngineConfig, ModelSpec
from engine.core.sampling_params import SamplingParams
from engine.core.scheduler import SchedulerOutput
from engine.core.sequence import Sequence
from engine.llm_engine import LLMEngine

STREAM = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
LONG = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
STREAMS = {"s-l": ("l", [0, 3, 4, 5]), "s-q": ("q", [0, 6, 7]), "s-m": ("m", [0, 8, 9, 10, 11])}
LONG_PROMPT = [0, *(((7 * k) % 300) + 2 for k in range(1, 180))]
"""180 tokens (the test models hold 256 positions)."""


def _engine(model_dirs: dict[str, Path], **options: object) -> LLMEngine:
    paths = {"l": model_dirs["llama"], "q": model_dirs["qwen3"], "m": model_dirs["mistral"]}
    specs = tuple(ModelSpec(name=n, path=str(p)) for n, p in paths.items())
    options = {"kv_cache_bytes": 1 << 21, "block_size": 4, **options}
    return LLMEngine(EngineConfig(models=specs, **options))  # type: ignore[arg-type]


def _serve(
    e: LLMEngine, *, overlap: bool | None = False, long_priority: int = 0
) -> tuple[dict[str, list[int]], list[dict[str, int]]]:
    """Streams first; after three steps a long prompt on two models; once it has its first token,
    a prompt sharing its first 160 tokens. Returns every request's tokens, and each step's tokens
    per request. ``overlap`` forces asynchronous scheduling on or off (None: as configured)."""
    if overlap is not None:
        e.async_scheduling = overlap
    for rid, (model, prompt) in STREAMS.items():
        e.add_request(rid, model, prompt, STREAM)
    tokens: dict[str, list[int]] = {}
    steps: list[dict[str, int]] = []
    while e.has_work:
        if len(steps) == 3:
            e.add_request("long-l", "l", LONG_PROMPT, LONG, priority=long_priority)
            e.add_request("long-m", "m", LONG_PROMPT, LONG, priority=long_priority)
        if tokens.get("long-l") and "shared" not in tokens:
            e.add_request("shared", "l", [*LONG_PROMPT[:160], 5, 6], LONG)
            tokens["shared"] = []
        got: dict[str, int] = {}
        for rid, delta in e.step():
            tokens.setdefault(rid, []).extend(delta.token_ids)
            got[rid] = got.get(rid, 0) + len(delta.token_ids)
        steps.append(got)
    assert e.block_pool.num_free_blocks == e.block_pool.num_blocks
    return tokens, steps


@pytest.fixture(scope="module")
def whole(model_dirs: dict[str, Path]) -> dict[str, list[int]]:
    e = _engine(model_dirs, max_num_batched_tokens=4096, long_prefill_token_threshold=None)
    tokens, _ = _serve(e)
    assert e.kv_manager.num_cache_hit_tokens >= 160
    assert tokens["long-l"] == _hf_greedy(model_dirs["llama"], LONG_PROMPT, LONG.max_tokens)
    return tokens


def _hf_greedy(path: Path, prompt: list[int], n: int) -> list[int]:
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    hf.generation_config.eos_token_id = None
    out = hf.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False)
    return list(out[0, len(prompt) :].tolist())


@pytest.mark.parametrize(
    ("budget", "threshold", "overlap"),
    [(4096, 16, False), (4096, 33, True), (24, None, False), (40, 7, True), (2048, 1, False)],
)
def test_chunked_prefill_gives_the_same_tokens(
    model_dirs: dict[str, Path],
    whole: dict[str, list[int]],
    budget: int,
    threshold: int | None,
    overlap: bool,
) -> None:
    e = _engine(model_dirs, max_num_batched_tokens=budget, long_prefill_token_threshold=threshold)
    tokens, steps = _serve(e, overlap=overlap)
    assert tokens == whole
    assert e.kv_manager.num_cache_hit_tokens >= 160
    cap = min(budget, threshold or budget)
    first_long = next(k for k, got in enumerate(steps) if "long-l" in got)
    assert first_long - 3 >= -(-len(LONG_PROMPT) // cap) - 1  # prefilled over that many steps


@pytest.mark.parametrize("long_priority", [0, -1])
def test_chunked_prefill_under_preemption_gives_the_same_tokens(
    model_dirs: dict[str, Path], whole: dict[str, list[int]], long_priority: int
) -> None:
    # With long_priority -1 the long prompts are more urgent than the streams: they preempt them
    # for their chunks' blocks, and the streams resume by recompute.
    block_bytes = _engine(model_dirs, kv_cache_bytes=1 << 16).kv_cache.block_bytes
    e = _engine(
        model_dirs,
        kv_cache_bytes=100 * block_bytes,
        max_num_batched_tokens=64,
        long_prefill_token_threshold=16,
    )
    seqs = {}
    add = e.add_tokenized

    def spy(request_id: str, *args: Any, **kw: Any) -> list[Sequence]:
        seqs[request_id] = add(request_id, *args, **kw)[0]
        return [seqs[request_id]]

    e.add_tokenized = spy  # type: ignore[method-assign]
    tokens, _ = _serve(e, long_priority=long_priority)
    assert e.scheduler.num_preemptions > 0
    assert tokens == whole
    if long_priority < 0:
        assert seqs["long-l"].num_preemptions == seqs["long-m"].num_preemptions == 0
        assert sum(seqs[rid].num_preemptions for rid in STREAMS) > 0


@pytest.mark.parametrize("overlap", [False, True])
def test_streams_get_a_token_every_step_while_a_long_prompt_prefills(
    model_dirs: dict[str, Path], overlap: bool
) -> None:
    e = _engine(model_dirs, max_num_batched_tokens=32, long_prefill_token_threshold=16)
    schedule = e.scheduler.schedule
    outs: list[SchedulerOutput] = []

    def spy() -> SchedulerOutput:
        outs.append(schedule())
        return outs[-1]

    e.scheduler.schedule = spy  # type: ignore[method-assign]
    tokens, steps = _serve(e, overlap=overlap)
    first_long = next(k for k, got in enumerate(steps) if "long-l" in got)
    assert first_long >= 3 + len(LONG_PROMPT) // 16  # chunks of at most 16 tokens
    for k in range(first_long + 1):  # from the streams' first token to the long prompt's
        assert all(steps[k].get(rid) == 1 for rid in STREAMS), (k, steps[k])
    assert all(len(tokens[rid]) == STREAM.max_tokens for rid in STREAMS)
    for out in outs:
        assert out.num_batched_tokens <= 32
        assert all(i.num_new_tokens <= 16 for i in out.scheduled)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_on_cuda_chunks_beside_decode_graphs_change_no_token(model_dirs: dict[str, Path]) -> None:
    # Decode steps replay graphs, a lone short prefill its prefill graph, mixed steps run eagerly;
    # steps overlap (asynchronous scheduling). Chunked or whole, the same tokens, and the streams
    # get a token every step while the long prompt is prefilled.
    def serve(**options: object) -> tuple[dict[str, list[int]], list[dict[str, int]]]:
        e = _engine(model_dirs, device="cuda", block_size=16, **options)
        assert e.async_scheduling and all(r.graphs is not None for r in e.runners.values())
        return _serve(e, overlap=None)

    whole, _ = serve(max_num_batched_tokens=4096, long_prefill_token_threshold=None)
    for threshold in (16, 50):
        tokens, steps = serve(max_num_batched_tokens=2048, long_prefill_token_threshold=threshold)
        assert tokens == whole, threshold
        first_long = next(k for k, got in enumerate(steps) if "long-l" in got)
        assert first_long >= 3 + len(LONG_PROMPT) // threshold
        assert all(steps[k].get(rid) == 1 for k in range(first_long + 1) for rid in STREAMS)
