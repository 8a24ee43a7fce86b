"""The engine core end to end on CPU: several models in one pool, overload, fairness, abort."""

from __future__ import annotations

from pathlib import Path

import msgspec
import torch

from engine.config import EngineConfig, ModelSpec
from engine.core.sampling_params import SamplingParams
from engine.llm_engine import LLMEngine

GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)


def engine(paths: dict[str, Path], **options: int) -> LLMEngine:
    specs = tuple(ModelSpec(name=n, path=str(p)) for n, p in paths.items())
    options = {"kv_cache_bytes": 1 << 20, **options}
    return LLMEngine(EngineConfig(models=specs, block_size=4, **options))  # type: ignore[arg-type]


def drain(e: LLMEngine) -> dict[str, list[int]]:
    tokens: dict[str, list[int]] = {}
    while e.has_work:
        for rid, d in e.step():
            tokens.setdefault(rid, []).extend(d.token_ids)
    return tokens


def hf_greedy(path: Path, prompt: list[int], n: int) -> list[int]:
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    hf.generation_config.eos_token_id = None
    out = hf.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False)
    return out[0, len(prompt) :].tolist()


def test_models_of_different_shapes_share_one_pool_exactly(model_dirs: dict[str, Path]) -> None:
    # llama: head_dim 16; qwen3: head_dim 32 -> blocks are sized for qwen3, llama uses a prefix.
    e = engine({"l": model_dirs["llama"], "q": model_dirs["qwen3"]}, kv_cache_bytes=40 * 4096)
    assert e.kv_cache.block_bytes == 2 * 2 * 2 * 32 * 4 * 4
    prompts = {"l1": [0, *range(10, 30)], "q1": [0, *range(50, 70)], "l2": [0, 3, 4], "q2": [0, 8, 9, 10]}
    for rid, prompt in prompts.items():
        e.add_request(rid, rid[0], prompt, GREEDY)
    tokens = drain(e)
    for rid, prompt in prompts.items():
        path = model_dirs["llama" if rid[0] == "l" else "qwen3"]
        assert tokens[rid] == hf_greedy(path, prompt, 24), rid
    assert e.block_pool.num_free_blocks == e.block_pool.num_blocks


def test_overload_never_crashes_and_every_request_finishes(model_dirs: dict[str, Path]) -> None:
    e = engine({"l": model_dirs["llama"]}, kv_cache_bytes=12 * 2048, max_num_batched_tokens=16)
    for i in range(12):
        e.add_request(
            f"r{i}", "l", [0, *range(5 + i, 25 + i)], SamplingParams(max_tokens=40, ignore_eos=True)
        )
    finished: dict[str, str | None] = {}
    while e.has_work:
        for rid, d in e.step():
            if d.finish_reason is not None:
                finished[rid] = d.finish_reason
    assert len(finished) == 12
    assert e.scheduler.num_preemptions > 0
    # 20 prompt + 40 output tokens = 15 blocks > 12 in the pool: each ends at the pool's edge.
    assert set(finished.values()) == {"length"}
    assert e.block_pool.num_free_blocks == 12


def test_a_flood_on_one_model_does_not_starve_another(model_dirs: dict[str, Path]) -> None:
    e = engine({"a": model_dirs["llama"], "b": model_dirs["qwen2"]}, max_num_seqs=4)
    for i in range(20):
        e.add_request(f"a{i}", "a", [0, 5, 6, i + 7], SamplingParams(max_tokens=8, ignore_eos=True))
    e.add_request("b0", "b", [0, 5, 6], SamplingParams(max_tokens=8, ignore_eos=True))
    order: list[str] = []
    while e.has_work:
        order.extend(rid for rid, d in e.step() if d.finish_reason is not None)
    assert order.index("b0") < 4


def test_abort_frees_blocks_at_once(model_dirs: dict[str, Path]) -> None:
    e = engine({"a": model_dirs["llama"]})
    e.add_request("x", "a", [0, *range(10, 40)], SamplingParams(max_tokens=50, ignore_eos=True, n=2))
    e.step()
    assert e.block_pool.num_free_blocks < e.block_pool.num_blocks
    deltas = e.abort("x")
    assert [d.finish_reason for _, d in deltas] == ["abort", "abort"]
    assert e.block_pool.num_free_blocks == e.block_pool.num_blocks
    assert not e.has_work and e.abort("x") == []


def test_tenant_salt_keeps_prefix_caches_apart(model_dirs: dict[str, Path]) -> None:
    e = engine({"a": model_dirs["llama"]})
    prompt = [0, *range(10, 30)]
    e.add_request("t1", "a", prompt, GREEDY, tenant="bank-a")
    drain(e)
    e.add_request("t2", "a", prompt, GREEDY, tenant="bank-b")
    drain(e)
    assert e.kv_manager.num_cache_hit_tokens == 0
    e.add_request("t3", "a", prompt, GREEDY, tenant="bank-a")
    drain(e)
    assert e.kv_manager.num_cache_hit_tokens == 20


def _texts(e: LLMEngine, params: list[SamplingParams]) -> dict[str, tuple[str, str | None, int]]:
    for i, p in enumerate(params):
        e.add_request(f"r{i}", "q", [0, *range(20 + i, 30 + i)], p)
    out: dict[str, tuple[str, str | None, int]] = {}
    while e.has_work:
        for rid, d in e.step():
            text, _, n = out.get(rid, ("", None, 0))
            out[rid] = (text + d.text, d.finish_reason, n + len(d.token_ids))
    return out


def test_text_decoded_at_the_end_equals_the_streamed_text(model_dirs: dict[str, Path]) -> None:
    # Same seeds, same tokens: "final" must give each sequence exactly the text the deltas sum to,
    # whatever ends it (length, EOS, a stop token with and without its text, the pool running out).
    first = engine({"q": model_dirs["qwen3"]}).models["q"]
    eos = min(first.eos_token_ids)
    cases = [
        SamplingParams(temperature=1.0, seed=s, max_tokens=m, stop_token_ids=t, include_stop_str_in_output=inc)
        for s, m, t, inc in [
            (1, 30, (), False), (2, 7, (), False), (3, 40, (eos,), False), (4, 40, (eos,), True),
            (5, 40, tuple(range(100, 140)), False), (6, 40, tuple(range(100, 140)), True),
        ]
    ]  # fmt: skip
    streamed = _texts(engine({"q": model_dirs["qwen3"]}), cases)
    final_cases = [msgspec.structs.replace(p, output_text="final") for p in cases]
    at_end = _texts(engine({"q": model_dirs["qwen3"]}), final_cases)
    assert at_end == streamed
    assert any(reason == "stop" for _, reason, _ in streamed.values())
    assert all(text for text, _, _ in streamed.values())
    # Outgrowing the whole pool (ended by the scheduler, not by a token) still returns the text.
    tight = {"kv_cache_bytes": 6 * 4096}
    long = [SamplingParams(temperature=0, max_tokens=200, ignore_eos=True)]
    streamed = _texts(engine({"q": model_dirs["qwen3"]}, **tight), long)
    long_final = [msgspec.structs.replace(long[0], output_text="final")]
    assert _texts(engine({"q": model_dirs["qwen3"]}, **tight), long_final) == streamed
    assert streamed["r0"][2] < 200 and streamed["r0"][0]


def test_a_prefill_chunk_cut_to_one_token_samples_nothing(model_dirs: dict[str, Path]) -> None:
    # A two-token step budget: one sequence decodes while the other's prompt is prefilled a token
    # at a time; a one-token chunk of a prompt must not be taken for a decode (which samples).
    e = engine({"l": model_dirs["llama"]}, max_num_batched_tokens=2)
    prompts = {"a": [0, 5, 6], "b": [0, *range(10, 20)]}
    for rid, prompt in prompts.items():
        e.add_request(rid, "l", prompt, GREEDY)
    tokens = drain(e)
    for rid, prompt in prompts.items():
        assert tokens[rid] == hf_greedy(model_dirs["llama"], prompt, 24), rid


def test_an_empty_text_prompt_is_the_document_boundary_and_bias_reaches_the_vocabulary(
    model_dirs: dict[str, Path],
) -> None:
    e = engine({"demo-chat": model_dirs["qwen3"]})
    tokenizer = e.model("demo-chat").tokenizer
    boundary = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    assert e.prompt_token_ids("demo-chat", "") == [boundary]  # OpenAI's default <|endoftext|>
    vocab = e.model("demo-chat").config.vocab_size
    try:
        e.add_request("r", "demo-chat", "hi", SamplingParams(logit_bias=((vocab, 1.0),)))
    except Exception as exc:
        assert getattr(exc, "param", None) == "logit_bias"
    else:
        raise AssertionError("a bias on a token outside the vocabulary was accepted")
    forced = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True, logit_bias=((vocab - 1, 100.0),))
    e.add_request("f", "demo-chat", "hi", forced)
    assert drain(e)["f"] == [vocab - 1] * 4
