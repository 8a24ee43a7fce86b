"""The packed grammar mask: exactly the unpacked reference's -inf, only on the rows it names."""

from __future__ import annotations

import pytest
import torch

from engine.kernels.token_bitmask import apply_token_bitmask
from engine.sampling.grammar_mask import unpack_bits


def _reference(logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int]) -> torch.Tensor:
    want = logits.clone()
    allowed = unpack_bits(bitmask.cpu(), torch.arange(32, dtype=torch.int32), logits.shape[1])
    for k, r in enumerate(rows):
        if r >= 0:
            want[r] = want[r].masked_fill(~allowed[k].to(logits.device), float("-inf"))
    return want


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_the_unpacked_reference(device: str, dtype: torch.dtype) -> None:
    vocab = 5000  # two blocks of 4,096, the last partial; not a multiple of 32
    words = (vocab + 31) // 32
    bitmask = torch.randint(-(2**31), 2**31 - 1, (4, words), dtype=torch.int32)
    bitmask[2] = -1  # every token allowed: the row must come out unchanged
    logits = torch.randn(6, vocab, device=device).to(dtype)
    rows = [4, 0, 1, -1]  # out of order, one mask skipped; rows 2, 3 and 5 are free
    want = _reference(logits, bitmask, rows)
    apply_token_bitmask(logits, bitmask.to(device), torch.tensor(rows, dtype=torch.int32, device=device))
    assert torch.equal(logits, want)
    assert torch.isinf(logits[4]).sum() > vocab // 4  # random words forbid about half
    assert not torch.isinf(logits[[1, 2, 3, 5]]).any()


def test_a_wider_bitmask_and_no_masks(device: str) -> None:
    # llguidance's rows may be padded past the vocabulary; bits past it are ignored.
    logits = torch.randn(2, 40, device=device)
    bitmask = torch.zeros(1, 4, dtype=torch.int32)  # 128 bits for 40 tokens, nothing allowed
    bitmask[0, 0] = 1 << 3
    want = _reference(logits, bitmask, [1])
    apply_token_bitmask(logits, bitmask.to(device), torch.tensor([1], dtype=torch.int32, device=device))
    assert torch.equal(logits, want) and torch.isfinite(logits[1]).nonzero().flatten().tolist() == [3]
    before = logits.clone()
    empty = torch.empty(0, 4, dtype=torch.int32, device=device)
    apply_token_bitmask(logits, empty, torch.empty(0, dtype=torch.int32, device=device))
    assert torch.equal(logits, before)


def test_bad_shapes_are_refused(device: str) -> None:
    logits = torch.randn(2, 64, device=device)
    rows = torch.zeros(1, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match="cannot cover"):
        apply_token_bitmask(logits, torch.zeros(1, 1, dtype=torch.int32, device=device), rows)
    with pytest.raises(ValueError, match="int32"):
        apply_token_bitmask(logits, torch.zeros(1, 2, dtype=torch.int64, device=device), rows)
    with pytest.raises(ValueError, match="rows"):
        apply_token_bitmask(logits, torch.zeros(1, 2, dtype=torch.int32, device=device), rows.long())
