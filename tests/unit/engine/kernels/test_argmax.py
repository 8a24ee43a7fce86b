"""Argmax keys (engine.kernels.argmax) and the greedy LM head: torch.argmax's choice, every time."""

from __future__ import annotations

import importlib

import pytest
import torch

from engine.kernels import PendingNorm, normed_gemv
from engine.kernels.argmax import MAX_INDEX, argmax_keys, keys_to_tokens
from engine.kernels.normed_gemv import normed_gemv_argmax


def _tokens(logits: torch.Tensor) -> torch.Tensor:
    return keys_to_tokens(argmax_keys(logits))


def test_keys_pick_what_torch_argmax_picks(device: str) -> None:
    logits = torch.randn(3, 2500).to(device)  # three blocks of 1,024, the last one partial
    logits[1, 2400] = 50.0  # in the partial block
    assert _tokens(logits).tolist() == logits.argmax(dim=-1).tolist()
    assert _tokens(logits.to(torch.bfloat16)).tolist() == logits.to(torch.bfloat16).argmax(dim=-1).tolist()


def test_ties_nan_signed_zero_and_infinity_follow_torch(device: str) -> None:
    rows = torch.full((6, 3000), -1.0)
    rows[0, [7, 1500, 2999]] = 4.0  # a tie across blocks: the lowest index
    rows[1, [2100, 40]] = float("inf")  # infinities tie too
    rows[2, [900, 2000]] = float("nan")  # the first NaN beats everything, even +inf
    rows[2, 10] = float("inf")
    rows[3] = float("-inf")  # nothing finite: index 0
    rows[4, 30], rows[4, 20] = 0.0, -0.0  # -0.0 == +0.0: the lower index
    rows[4] = torch.where(rows[4] == -1.0, -2.0, rows[4])
    rows[5, 1234] = -0.5  # the only value above the rest
    want = rows.argmax(dim=-1).tolist()
    assert want == [7, 40, 900, 0, 20, 1234]
    assert _tokens(rows.to(device)).tolist() == want


def test_keys_are_the_blocks_best_and_strided_rows_work(device: str) -> None:
    wide = torch.randn(2, 4096).to(device)
    view = wide[:, :2048]  # row stride 4,096
    keys = argmax_keys(view)
    assert keys.shape == (2, 2)
    assert keys_to_tokens(keys).tolist() == view.argmax(dim=-1).tolist()
    # Each key is its own block's best: reducing one block alone gives that block's argmax.
    assert (MAX_INDEX - (keys[:, 1] & MAX_INDEX)).tolist() == (view[:, 1024:].argmax(dim=-1) + 1024).tolist()
    assert argmax_keys(torch.empty(0, 10, device=device)).shape == (0, 1)


@pytest.mark.parametrize("n_out", [100, 4096 + 7])
def test_greedy_lm_head_gives_normed_gemv_logits_and_their_argmax(
    device: str, n_out: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    dtype, k = torch.bfloat16, 64
    # (the package exports the function under the module's name)
    monkeypatch.setattr(importlib.import_module("engine.kernels.normed_gemv"), "BLOCK_N", 16)
    weight = torch.randn(n_out, k).to(dtype).to(device)
    weight[n_out - 3] = weight[5]  # a tie between two programs: the lower index

    def pending() -> PendingNorm:
        torch.manual_seed(1)
        res = torch.randn(1, k).to(dtype).to(device)
        return PendingNorm(torch.randn(1, k).to(dtype).to(device), res, torch.ones(k).to(dtype).to(device), 1e-6,
                           torch.empty_like(res))  # fmt: skip

    want = normed_gemv(pending(), weight, out_dtype=torch.float32)
    logits, keys = normed_gemv_argmax(pending(), weight, out_dtype=torch.float32)
    assert torch.equal(logits, want)
    assert keys.shape == (1, -(-n_out // 16))
    assert keys_to_tokens(keys).tolist() == want.argmax(dim=-1).tolist()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_lm_head_argmax_at_a_real_vocabulary() -> None:
    from engine.layers.embedding import ParallelLMHead

    dtype, hidden, vocab = torch.bfloat16, 1024, 151936
    head = ParallelLMHead(vocab, hidden).to(dtype).cuda()
    head.weight.data.normal_()
    res = torch.randn(1, hidden).to(dtype).cuda()
    pending = PendingNorm(torch.randn(1, hidden).to(dtype).cuda(), res, torch.ones(hidden).to(dtype).cuda(), 1e-6,
                          torch.empty_like(res))  # fmt: skip
    logits, keys = head.forward_argmax(pending)  # the fused GEMV's keys
    assert logits.dtype == torch.float32 and logits.shape == (1, vocab)
    assert keys_to_tokens(keys).tolist() == logits.argmax(dim=-1).tolist()
    rows = torch.randn(3, hidden).to(dtype).cuda()
    logits, keys = head.forward_argmax(rows)  # cuBLAS, then keys of its logits
    assert keys_to_tokens(keys).tolist() == logits.argmax(dim=-1).tolist()
