"""Tensor parallel on CPU (gloo, float32): two ranks give the tokens and logits of one.

One engine hosts every architecture at once (multi-model TP) and serves all the asserts: each
spawned rank costs a process start and an import of torch. The last test stops them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from engine.config import EngineConfig, ModelSpec
from engine.core.sampling_params import SamplingParams
from engine.errors import EngineConfigError
from engine.llm_engine import LLMEngine
from engine.worker.model_runner import RunnerOutput

from .conftest import ARCHITECTURES

PROMPTS = {"a": [0, 5, 9, 33, 100], "b": [0, *range(40, 56)], "c": [0, *range(60, 89)]}
LATER = {"d": [0, *range(40, 52), 7, 7]}
"""Sent after the others finish: shares 12 leading tokens (3 full blocks) with "b"."""
GREEDY = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
SEEDED = SamplingParams(temperature=1.0, top_p=0.9, seed=11, n=2, max_tokens=10, ignore_eos=True)

Result = tuple[dict[str, list[list[int]]], dict[str, list[torch.Tensor]], int]


def config(model_dirs: dict[str, Path], tp: int) -> EngineConfig:
    models = tuple(ModelSpec(name=arch, path=str(model_dirs[arch])) for arch in ARCHITECTURES)
    return EngineConfig(models=models, block_size=4, kv_cache_bytes=1 << 20, tensor_parallel_size=tp)


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


@pytest.fixture(scope="module")
def single(model_dirs: dict[str, Path]) -> Result:
    return generate(LLMEngine(config(model_dirs, 1)))


@pytest.fixture(scope="module")
def sharded_engine(model_dirs: dict[str, Path], single: Result):  # type: ignore[no-untyped-def]
    engine = LLMEngine(config(model_dirs, 2))
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def sharded(sharded_engine: LLMEngine) -> Result:
    return generate(sharded_engine)


def test_greedy_tokens_and_logits_match_one_rank(single: Result, sharded: Result) -> None:
    greedy = [rid for rid in single[0] if not rid.endswith("seeded")]
    assert len(greedy) == len(ARCHITECTURES) * 4
    for rid in greedy:
        assert sharded[0][rid] == single[0][rid], rid
        ref, got = torch.stack(single[1][f"{rid}#0"]), torch.stack(sharded[1][f"{rid}#0"])
        assert got.shape == ref.shape == (GREEDY.max_tokens, ref.shape[1])
        assert torch.allclose(got, ref, atol=1e-5, rtol=0), (rid, (got - ref).abs().max())


def test_seeded_sampling_matches_one_rank(single: Result, sharded: Result) -> None:
    seeded = [rid for rid in single[0] if rid.endswith("seeded")]
    for rid in seeded:
        assert sharded[0][rid] == single[0][rid], rid
        assert all(len(seq) == SEEDED.max_tokens for seq in sharded[0][rid])
    assert any(single[0][rid][0] != single[0][rid][1] for rid in seeded)  # it really sampled


def test_prefix_cache_hits_as_on_one_rank(single: Result, sharded: Result) -> None:
    assert sharded[2] == single[2] > 0


@pytest.mark.parametrize(
    ("tp", "message"),
    [(3, "3 does not divide its 4 attention heads"), (4, "4 does not divide its 2 KV heads")],
)
def test_size_not_dividing_the_model_is_refused(model_dirs: dict[str, Path], tp: int, message: str) -> None:
    with pytest.raises(EngineConfigError, match=message):
        LLMEngine(config(model_dirs, tp))


@pytest.mark.timeout(60)
def test_close_stops_the_other_ranks(sharded_engine: LLMEngine, sharded: Result) -> None:
    """Last: it takes the shared engine down (a killed rank: test_tensor_parallel_failure)."""
    ranks = sharded_engine.ranks
    assert ranks is not None
    (pid,) = ranks.pids
    assert pid is not None
    sharded_engine.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert sharded_engine.ranks is None
