"""Asynchronous scheduling (step N+1 launched before step N's tokens are read) changes nothing
a client sees: the same tokens, text and finish reasons as one step at a time.

The overlap is switched on for CUDA; its bookkeeping (placeholders, rows reading the previous
step's tokens, sequences ending while a step is in flight) is device-independent, so these tests
force it on for the CPU engine, where every "launch" completes at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.config import EngineConfig, ModelSpec
from engine.core.sampling_params import SamplingParams
from engine.core.scheduler import ScheduledSeq
from engine.core.structured_output import StructuredOutput
from engine.llm_engine import LLMEngine
from engine.worker.model_runner import RunnerOutput


def _engine(paths: dict[str, Path], *, overlap: bool, **options: int) -> LLMEngine:
    specs = tuple(ModelSpec(name=n, path=str(p)) for n, p in paths.items())
    options = {"kv_cache_bytes": 1 << 20, **options}
    e = LLMEngine(EngineConfig(models=specs, block_size=4, **options))  # type: ignore[arg-type]
    e.async_scheduling = overlap
    return e


def _drain(e: LLMEngine) -> dict[str, tuple[list[int], str, str | None]]:
    got: dict[str, tuple[list[int], str, str | None]] = {}
    while e.has_work:
        for rid, d in e.step():
            ids, text, _ = got.get(rid, ([], "", None))
            got[rid] = (ids + d.token_ids, text + d.text, d.finish_reason)
    return got


_REQUESTS = {
    "greedy": ("l", [0, *range(10, 30)], SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)),
    "short": ("l", [0, 3, 4], SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)),
    "seeded": ("q", [0, 8, 9, 10], SamplingParams(temperature=0.8, seed=7, max_tokens=17, ignore_eos=True)),
    "eos": ("q", [0, *range(40, 52)], SamplingParams(temperature=0, max_tokens=30)),
    "penalised": ("l", [0, 5, 6], SamplingParams(temperature=0, max_tokens=9, repetition_penalty=1.3)),
    "n2": ("q", [0, 11, 12, 13], SamplingParams(temperature=1.0, seed=3, n=2, max_tokens=6, ignore_eos=True)),
}


# Constrained rows are looked ahead too: their masks wait for the previous step's token.
_CONSTRAINED = {
    "greedy": _REQUESTS["greedy"],
    "json": (
        "q",
        [0, 14, 15],
        SamplingParams(temperature=0.9, seed=5, max_tokens=24, structured=StructuredOutput.json_object()),
    ),
    "enum": (
        "l",
        [0, 16],
        SamplingParams(
            temperature=0, max_tokens=24, structured=StructuredOutput.json_schema({"enum": ["yes", "no"]})
        ),
    ),
    "array": (
        "q",
        [0, 17],
        SamplingParams(
            temperature=0,
            max_tokens=12,
            structured=StructuredOutput.json_schema({"type": "array", "items": {"type": "integer"}}),
        ),
    ),
}


def _run(
    model_dirs: dict[str, Path],
    *,
    overlap: bool,
    requests: dict[str, tuple[str, list[int], SamplingParams]] = _REQUESTS,
    **options: int,
) -> dict[str, tuple[list[int], str, str | None]]:
    e = _engine({"l": model_dirs["llama"], "q": model_dirs["qwen3"]}, overlap=overlap, **options)
    for rid, (model, prompt, params) in requests.items():
        e.add_request(rid, model, prompt, params)
    got = _drain(e)
    assert e.block_pool.num_free_blocks == e.block_pool.num_blocks
    assert not e.has_work
    return got


def test_overlapped_steps_give_the_same_outputs(model_dirs: dict[str, Path]) -> None:
    plain = _run(model_dirs, overlap=False)
    overlapped = _run(model_dirs, overlap=True)
    assert overlapped == plain
    assert len(plain["greedy"][0]) == 20 and plain["short"][0] and len(plain["short"][0]) == 1
    assert all(min(ids) >= 0 for ids, _, _ in overlapped.values())


def test_a_token_in_flight_is_a_held_place_never_a_fake_id(model_dirs: dict[str, Path]) -> None:
    # While step N+1 is launched, step N's tokens are on the device: the sequences count them
    # (num_pending_tokens) and their token_ids hold real ids only.
    e = _engine({"l": model_dirs["llama"]}, overlap=True)
    runner = e.runners["l"]
    execute = runner.execute
    seen: list[tuple[bool, int, list[int]]] = []  # (reads pending, places held, token ids) per row

    def spy(items: list[ScheduledSeq], *args: Any) -> RunnerOutput:
        seen.extend((i.reads_pending, i.seq.num_pending_tokens, list(i.seq.token_ids)) for i in items)
        return execute(items, *args)

    runner.execute = spy  # type: ignore[method-assign]
    prompt = [0, *range(10, 20)]
    e.add_request("a", "l", prompt, SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))
    got = _drain(e)
    held = [(pending, ids) for reads_pending, pending, ids in seen if reads_pending]
    assert len(held) == 5  # every decode after the first token read its input from the device
    assert [ids for _, ids in held] == [prompt + got["a"][0][:k] for k in range(5)]
    assert all(pending == 1 for pending, _ in held)
    assert all(min(ids) >= 0 for *_, ids in seen)


@pytest.mark.parametrize("options", [{}, {"kv_cache_bytes": 14 * 2048, "max_num_batched_tokens": 8}])
def test_constrained_rows_give_the_same_outputs(model_dirs: dict[str, Path], options: dict[str, int]) -> None:
    plain = _run(model_dirs, overlap=False, requests=_CONSTRAINED, **options)
    assert _run(model_dirs, overlap=True, requests=_CONSTRAINED, **options) == plain
    assert plain["enum"][1] in ('"yes"', '"no"') and plain["enum"][2] == "stop"


def test_constrained_rows_do_not_stop_the_look_ahead(model_dirs: dict[str, Path]) -> None:
    e = _engine({"l": model_dirs["llama"]}, overlap=True)
    spec = StructuredOutput.json_schema({"type": "array", "items": {"type": "boolean"}, "minItems": 6})
    e.add_request("c", "l", [0, 7, 8], SamplingParams(temperature=0, max_tokens=8, structured=spec))
    e.add_request("f", "l", [0, 9, 10], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
    e.step()
    e.step()
    assert e.is_step_in_flight  # launched past both rows' unread tokens
    assert _drain(e)["c"][2] == "length"


def test_same_outputs_under_preemption_and_chunked_prefill(model_dirs: dict[str, Path]) -> None:
    tight = {"kv_cache_bytes": 14 * 2048, "max_num_batched_tokens": 8}
    e = _engine({"l": model_dirs["llama"]}, overlap=True, **tight)
    assert e.kv_cache.num_blocks < 20  # tight enough that the requests below preempt each other
    assert _run(model_dirs, overlap=True, **tight) == _run(model_dirs, overlap=False, **tight)


def test_stop_string_ends_the_sequence_and_drops_the_extra_row(model_dirs: dict[str, Path]) -> None:
    e = _engine({"l": model_dirs["llama"]}, overlap=True)
    free = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    e.add_request("probe", "l", [0, 7, 8], free)
    text = _drain(e)["probe"][1]
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    e.add_request(
        "stopped", "l", [0, 7, 8], SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, stop=(stop,))
    )
    _, stopped_text, reason = _drain(e)["stopped"]
    assert reason == "stop" and stop not in stopped_text and text.startswith(stopped_text)
    assert e.block_pool.num_free_blocks == e.block_pool.num_blocks


def test_abort_while_a_step_is_in_flight(model_dirs: dict[str, Path]) -> None:
    e = _engine({"l": model_dirs["llama"]}, overlap=True)
    e.add_request(
        "a", "l", [0, *range(10, 20)], SamplingParams(temperature=0, max_tokens=50, ignore_eos=True)
    )
    e.add_request("b", "l", [0, *range(30, 40)], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
    for _ in range(3):
        e.step()
    assert e.is_step_in_flight  # the next step was launched before this one's tokens were read
    ((rid, closing),) = e.abort("a")
    assert rid == "a" and closing.finish_reason == "abort"
    rest = _drain(e)
    assert "a" not in rest and rest["b"][2] == "length"
    assert e.block_pool.num_free_blocks == e.block_pool.num_blocks


@pytest.mark.parametrize("overlap", [False, True])
def test_last_token_by_length_is_not_looked_past(model_dirs: dict[str, Path], overlap: bool) -> None:
    # A sequence at its max_model_len: a look-ahead row would need a position past the limit.
    e = _engine({"l": model_dirs["llama"]}, overlap=overlap)
    limit = e.models["l"].max_model_len
    e.add_request(
        "edge", "l", [0, *range(1, limit - 3)], SamplingParams(temperature=0, max_tokens=50, ignore_eos=True)
    )
    ids, _, reason = _drain(e)["edge"]
    assert reason == "length" and len(ids) == 3


@pytest.mark.parametrize("overlap", [False, True])
def test_prefetched_masks_change_no_token(model_dirs: dict[str, Path], overlap: bool) -> None:
    # With no step in flight, the engine fills the running constrained rows' next masks on a
    # worker thread between steps (with one in flight, their last tokens are not known yet); under
    # preemption, chunked prefill and an abort mid-document the tokens are those of masks filled
    # at sampling time.
    tight = {"kv_cache_bytes": 14 * 2048, "max_num_batched_tokens": 8}
    requests = {rid: r for rid, r in _CONSTRAINED.items() if r[0] == "q"}
    requests["json2"] = ("q", [0, 18, 19], requests["json"][2])

    def run(prefetch: bool) -> tuple[dict[str, tuple[list[int], str, str | None]], int]:
        e = _engine({"q": model_dirs["qwen3"]}, overlap=overlap, **tight)
        if not prefetch:
            e._prefetch_masks = lambda cur: None  # type: ignore[method-assign]
        for rid, (model, prompt, params) in requests.items():
            e.add_request(rid, model, prompt, params)
        got: dict[str, tuple[list[int], str, str | None]] = {}
        for step in range(100):
            if not e.has_work:
                break
            deltas = e.step() + (e.abort("json2") if step == 6 else [])
            for rid, d in deltas:
                ids, text, _ = got.get(rid, ([], "", None))
                got[rid] = (ids + d.token_ids, text + d.text, d.finish_reason)
        assert not e.has_work and e.block_pool.num_free_blocks == e.block_pool.num_blocks
        return got, e.sampler.grammar_mask.num_prefetch_hits

    plain, no_hits = run(prefetch=False)
    prefetched, hits = run(prefetch=True)
    assert prefetched == plain
    assert no_hits == 0 and (overlap or hits > 10)
    assert plain["json2"][2] == "abort" and plain["json"][2] is not None
