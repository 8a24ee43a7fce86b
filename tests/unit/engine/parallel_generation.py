"""What the tensor- and pipeline-parallel tests run: every architecture in one engine, greedy and
seeded requests, then a prompt that hits the prefix cache; the tokens and rank 0's logits."""

from __future__ import annotations

from pathlib import Path

import torch

from engine.config import EngineConfig, ModelSpec
from engine.core.sampling_params import SamplingParams
from engine.llm_engine import LLMEngine
from engine.worker.model_runner import RunnerOutput

from .conftest import ARCHITECTURES

PROMPTS = {"a": [0, 5, 9, 33, 100], "b": [0, *range(40, 56)], "c": [0, *range(60, 89)]}
LATER = {"d": [0, *range(40, 52), 7, 7]}
"""Sent after the others finish: shares 12 leading tokens (3 full blocks) with "b"."""
GREEDY = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
SEEDED = SamplingParams(temperature=1.0, top_p=0.9, seed=11, n=2, max_tokens=10, ignore_eos=True)

Result = tuple[dict[str, list[list[int]]], dict[str, list[torch.Tensor]], int]


def config(model_dirs: dict[str, Path], tp: int, pp: int = 1) -> EngineConfig:
    models = tuple(ModelSpec(name=arch, path=str(model_dirs[arch])) for arch in ARCHITECTURES)
    return EngineConfig(
        models=models,
        block_size=4,
        kv_cache_bytes=1 << 20,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
    )


def generate(engine: LLMEngine) -> Result:
    """Per request (model/prompt), each sequence's tokens and rank 0's logits; prefix-cache hits."""
    logits: dict[str, list[torch.Tensor]] = {}
    for runner in engine.runners.values():
        execute = runner.execute

        def capture(items, *rest, execute=execute):  # type: ignore[no-untyped-def]
            out: RunnerOutput = execute(items, *rest)
            for row, item in zip(out.logits, [i for i in items if i.is_sampling], strict=True):
                logits.setdefault(f"{item.seq.request_id}#{item.seq.index}", []).append(row.clone())
            return out

        runner.execute = capture  # type: ignore[method-assign]
    tokens: dict[str, list[list[int]]] = {}

    def drain() -> None:
        while engine.has_work:
            for rid, delta in engine.step():
                seqs = tokens.setdefault(rid, [[], []])
                seqs[delta.index].extend(delta.token_ids)

    for batch in (PROMPTS, LATER):
        for arch in ARCHITECTURES:
            for name, prompt in batch.items():
                engine.add_request(f"{arch}/{name}", arch, prompt, GREEDY)
                engine.add_request(f"{arch}/{name}/seeded", arch, prompt, SEEDED)
        drain()
    return tokens, logits, engine.kv_manager.num_cache_hit_tokens


def assert_same_greedy(single: Result, parallel: Result) -> None:
    greedy = [rid for rid in single[0] if not rid.endswith("seeded")]
    assert len(greedy) == len(ARCHITECTURES) * 4
    for rid in greedy:
        assert parallel[0][rid] == single[0][rid], rid
        ref, got = torch.stack(single[1][f"{rid}#0"]), torch.stack(parallel[1][f"{rid}#0"])
        assert got.shape == ref.shape == (GREEDY.max_tokens, ref.shape[1])
        assert torch.allclose(got, ref, atol=1e-5, rtol=0), (rid, (got - ref).abs().max())


def assert_same_seeded(single: Result, parallel: Result) -> None:
    seeded = [rid for rid in single[0] if rid.endswith("seeded")]
    for rid in seeded:
        assert parallel[0][rid] == single[0][rid], rid
        assert all(len(seq) == SEEDED.max_tokens for seq in parallel[0][rid])
    assert any(single[0][rid][0] != single[0][rid][1] for rid in seeded)  # it really sampled
