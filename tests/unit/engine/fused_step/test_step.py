"""The fused step inside a real engine run gives the plain model's greedy tokens, whatever its tuning.

On CPU the runner runs the model's own forward; these tests hand it a ``FusedStep`` instead, so
every kernel of the CUDA path runs interpreted (``TRITON_INTERPRET``, tests/unit/engine/conftest.py)
on the same weights and KV pool. A lone sequence takes the batch-1 fusions (the norm inside the
GEMM after it, the embedding gathered by the first GEMV, RoPE and the KV write inside attention,
the split merge inside o_proj, the final norm inside the LM head); two sequences take the rest.
"""

from __future__ import annotations

import importlib
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from engine.core.sampling_params import SamplingParams
from engine.llm import LLM
from engine.tuning import DEFAULT_TUNING, CudaTuning

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available(), reason="an interpreter check; test_cuda covers the GPU"
)

_PROMPTS = [[0, *range(10, 22)], [0, 5, 6]]
_FUSED = replace(DEFAULT_TUNING, small_batch_max_splits=2)
"""Production tuning but for two key splits, not 16: the interpreter runs each program in turn."""
_UNFUSED = replace(
    _FUSED,
    norm_in_gemv=False,
    gather_in_first_gemv=False,
    rope_in_attention_max_seqs=0,
    merge_in_gemm=False,
    final_norm_in_lm_head=False,
)


def _tokens(llm: LLM, tuning: CudaTuning | None) -> list[list[int]]:
    """Greedy tokens of the first prompt alone, then of both together; ``tuning`` None: the model's
    own forward, else a fused step with that tuning."""
    from engine.fused_step import FusedStep

    runner = next(iter(llm.engine.runners.values()))
    runner.fused = None if tuning is None else FusedStep(runner.hosted.model, tuning)  # type: ignore[arg-type]
    params = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)
    alone = llm.generate(_PROMPTS[:1], params)
    return [o.token_ids for o in alone + llm.generate(_PROMPTS, params)]


def _llm(model_dir: Path, dtype: str) -> LLM:
    return LLM(str(model_dir), dtype=dtype, kv_cache_bytes=1 << 20, block_size=4, max_num_batched_tokens=16)


def test_same_greedy_tokens_as_the_model(model_dirs: dict[str, Path]) -> None:
    llm = _llm(model_dirs["qwen3"], "float32")
    assert _tokens(llm, _FUSED) == _tokens(llm, None)


def test_decode_fusions_change_no_token(model_dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    # bf16 takes the skinny GEMMs: SiLU-and-mul inside the down projection, and (with a split
    # launch shape forced on these tiny weights) split-K partials summed inside the next norm.
    from engine.fused_step import norm
    from engine.kernels import SkinnyGemmConfig

    skinny_gemm_module = importlib.import_module("engine.kernels.skinny_gemm")  # not the function
    split = SkinnyGemmConfig(block_n=64, block_k=64, split_k=2, use_dot=False)  # K = 128: two splits
    monkeypatch.setattr(skinny_gemm_module, "skinny_gemm_config", lambda m, n, k, **_: split)
    split_sums: list[int] = []
    real = norm.rms_norm_split_k

    def spy(*args: object, **kwargs: object) -> object:
        split_sums.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(norm, "rms_norm_split_k", spy)
    llm = _llm(model_dirs["qwen3"], "bfloat16")
    fused = _tokens(llm, _FUSED)
    assert split_sums
    assert _tokens(llm, _UNFUSED) == fused


@pytest.mark.parametrize("quantization", ["fp8", "int8"])
def test_quantized_o_proj_merges_the_attention_partials(
    model_dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch, quantization: str
) -> None:
    # A lone sequence's decode: o_proj's FP8 / INT8 GEMV merges attention's split partials as it
    # loads them, so no merge kernel runs for one token, and the logits are the merge kernel's bits.
    from engine.fused_step import FusedStep, gemm
    from engine.kernels import PendingMerge

    merged_tokens: list[int] = []  # tokens of each merge-kernel launch
    real_merge = PendingMerge.merge_into

    def merge_spy(self: PendingMerge, *args: object, **kwargs: object) -> torch.Tensor:
        merged_tokens.append(self.partials.shape[0])
        return real_merge(self, *args, **kwargs)  # type: ignore[arg-type]

    fused_merges: list[bool] = []  # whether o_proj's GEMV took the partials unmerged
    real_gemv = gemm.quant_gemv_deferred

    def gemv_spy(x: object, *args: object, **kwargs: object) -> object:
        fused_merges.append(isinstance(x, PendingMerge))
        return real_gemv(x, *args, **kwargs)  # type: ignore[arg-type]

    logits: list[torch.Tensor] = []
    real_logits = FusedStep.logits

    def logits_spy(self: FusedStep, *args: object, **kwargs: object) -> torch.Tensor:
        out = real_logits(self, *args, **kwargs)  # type: ignore[arg-type]
        logits.append(out.clone())
        return out

    monkeypatch.setattr(PendingMerge, "merge_into", merge_spy)
    monkeypatch.setattr(gemm, "quant_gemv_deferred", gemv_spy)
    monkeypatch.setattr(FusedStep, "logits", logits_spy)
    # (No prefix caching: the second run prefills the same rows, so every step's logits compare.)
    llm = LLM(str(model_dirs["qwen3"]), dtype="bfloat16", quantization=quantization, kv_cache_bytes=1 << 20,
              block_size=4, max_num_batched_tokens=16, enable_prefix_caching=False)  # fmt: skip
    fused = _tokens(llm, _FUSED)
    assert any(fused_merges) and 1 not in merged_tokens
    fused_logits = logits[:]
    merged_tokens.clear()
    fused_merges.clear()
    logits.clear()
    assert _tokens(llm, replace(_FUSED, merge_in_gemm=False)) == fused
    assert not any(fused_merges) and 1 in merged_tokens  # the lone decode's partials: the merge kernel
    assert len(logits) == len(fused_logits)
    assert all(torch.equal(a, b) for a, b in zip(logits, fused_logits, strict=True))


def test_a_cpu_engine_never_imports_the_kernels(model_dirs: dict[str, Path]) -> None:
    # The plain model is the CPU path: generating imports neither this package nor Triton (so a
    # test run's TRITON_INTERPRET, set before the first kernel import, always holds).
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from engine.llm import LLM\n"
        "from engine.core.sampling_params import SamplingParams\n"
        f"llm = LLM({str(model_dirs['qwen3'])!r}, kv_cache_bytes=1 << 20, block_size=4)\n"
        "llm.generate([[0, 5, 6]], SamplingParams(temperature=0, max_tokens=2, ignore_eos=True))\n"
        "print(sorted(m for m in ('engine.kernels', 'engine.fused_step', 'triton') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip().splitlines()[-1] == "[]"
