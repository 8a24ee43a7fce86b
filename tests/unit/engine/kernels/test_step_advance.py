"""The greedy decode graph's last kernel against what the host would stage for the next step."""

from __future__ import annotations

import pytest
import torch

from engine.kernels.argmax import argmax_keys
from engine.kernels.step_advance import step_advance

BS = 4  # block size


def _inputs(device: str) -> dict[str, torch.Tensor]:
    # Rows: mid-block; the last slot of a block (the next is in the table's next block); a
    # padding row; a sequence whose next position lies past its table's width.
    return {
        "positions": torch.tensor([5, 7, 0, 11], device=device),
        "context_lens": torch.tensor([6, 8, 0, 12], dtype=torch.int32, device=device),
        "slot_mapping": torch.tensor([13, 7, -1, 19], device=device),
        "block_tables": torch.tensor([[2, 3, 0], [1, 9, 5], [0, 0, 0], [8, 6, 4]], dtype=torch.int32).to(
            device
        ),
    }


def test_tokens_and_next_inputs(device: str) -> None:
    inputs = _inputs(device)
    logits = torch.randn(4, 3000, device=device)
    token_ids = torch.full((4,), 77, device=device)
    out = torch.zeros(4, dtype=torch.long, device=device)
    step_advance(argmax_keys(logits), token_ids, out, *inputs.values(), BS)
    want = logits.argmax(dim=-1)
    assert torch.equal(token_ids, want) and torch.equal(out, want)
    assert inputs["positions"].tolist() == [6, 8, 0, 12]
    assert inputs["context_lens"].tolist() == [7, 9, 0, 13]
    # slot = table[pos // BS] * BS + pos % BS; the padding row keeps -1 (no KV write)
    assert inputs["slot_mapping"].tolist()[:3] == [3 * BS + 2, 5 * BS + 0, -1]
    # Position 12 needs a fourth block the 3-wide table lacks: clamped, the host stages anyway.
    assert inputs["slot_mapping"][3].item() == 4 * BS + 0


def test_many_keys_reduce_in_blocks(device: str) -> None:
    # More keys than one load takes (the fused LM head makes 4,748 at a 152k vocabulary).
    inputs = _inputs(device)
    logits = torch.randn(4, 1500 * 1024, device=device) if device == "cuda" else torch.randn(4, 2100)
    keys = argmax_keys(logits)
    keys = keys.repeat_interleave(9000 // keys.shape[1] + 1, dim=1)  # over one load's 8,192 a row
    token_ids, out = (
        torch.zeros(4, dtype=torch.long, device=device),
        torch.zeros(4, dtype=torch.long, device=device),
    )
    step_advance(keys, token_ids, out, *inputs.values(), BS)
    assert token_ids.tolist() == logits.argmax(dim=-1).tolist()


def test_bad_shapes_are_refused(device: str) -> None:
    inputs = _inputs(device)
    keys = torch.zeros(4, 2, dtype=torch.long, device=device)
    ok = torch.zeros(4, dtype=torch.long, device=device)
    with pytest.raises(ValueError, match="out must be"):
        step_advance(keys, ok, torch.zeros(3, dtype=torch.long, device=device), *inputs.values(), BS)
    with pytest.raises(ValueError, match="positions must be"):
        step_advance(keys, ok, ok.clone(), inputs["positions"].int(), *list(inputs.values())[1:], BS)
    with pytest.raises(ValueError, match="one row per token"):
        step_advance(keys[:2], ok, ok.clone(), *inputs.values(), BS)
