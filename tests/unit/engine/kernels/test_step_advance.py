"""The greedy decode graph's last kernel: torch.argmax's tokens, and what the host would stage next."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from engine.kernels.step_advance import step_advance
from engine.tuning import DEFAULT_TUNING, CudaTuning

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


def _greedy(
    logits: torch.Tensor, counts: torch.Tensor | None = None, tuning: CudaTuning = DEFAULT_TUNING
) -> torch.Tensor:
    """step_advance's tokens for logits whose rows are all padding (only the tokens change)."""
    rows, device = logits.shape[0], logits.device
    counts = torch.zeros(rows, dtype=torch.int32, device=device) if counts is None else counts
    tokens, out = torch.full((rows,), -5, device=device), torch.full((rows,), -5, device=device)
    table = torch.zeros(rows, 2, dtype=torch.int32, device=device)
    ctx = torch.zeros(rows, dtype=torch.int32, device=device)
    slots, positions = (
        torch.full((rows,), -1, device=device),
        torch.zeros(rows, dtype=torch.long, device=device),
    )
    step_advance(logits, counts, tokens, out, positions, ctx, slots, table, BS, tuning=tuning)
    assert torch.equal(tokens, out)
    assert slots.tolist() == [-1] * rows and positions.tolist() == [0] * rows and ctx.tolist() == [0] * rows
    return tokens


def test_tokens_and_next_inputs(device: str) -> None:
    inputs = _inputs(device)
    logits = torch.randn(4, 3000, device=device)  # three blocks of 1,024, the last one partial
    logits[1, 2400] = 50.0  # in the partial block
    token_ids = torch.full((4,), 77, device=device)
    out = torch.zeros(4, dtype=torch.long, device=device)
    counts = torch.zeros(4, dtype=torch.int32, device=device)
    step_advance(logits, counts, token_ids, out, *inputs.values(), BS)
    want = logits.argmax(dim=-1)
    assert torch.equal(token_ids, want) and torch.equal(out, want)
    assert counts.tolist() == [0, 0, 0, 0]  # left ready for the next step
    assert inputs["positions"].tolist() == [6, 8, 0, 12]
    assert inputs["context_lens"].tolist() == [7, 9, 0, 13]
    # slot = table[pos // BS] * BS + pos % BS; the padding row keeps -1 (no KV write)
    assert inputs["slot_mapping"].tolist()[:3] == [3 * BS + 2, 5 * BS + 0, -1]
    # Position 12 needs a fourth block the 3-wide table lacks: clamped, the host stages anyway.
    assert inputs["slot_mapping"][3].item() == 4 * BS + 0
    # A second step from where the first left off: the counters were reset.
    step_advance(logits.flip(1), counts, token_ids, out, *inputs.values(), BS)
    assert torch.equal(token_ids, logits.flip(1).argmax(dim=-1))
    assert inputs["positions"].tolist() == [7, 9, 0, 13]


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
    assert _greedy(rows.to(device)).tolist() == want


def test_strided_rows_and_bf16_logits(device: str) -> None:
    wide = torch.randn(2, 4096).to(device)
    view = wide[:, :2048]  # row stride 4,096
    assert _greedy(view).tolist() == view.argmax(dim=-1).tolist()
    narrow = torch.randn(3, 1500).to(torch.bfloat16).to(device)
    assert _greedy(narrow).tolist() == narrow.argmax(dim=-1).tolist()


@pytest.mark.parametrize("block", [256, 4096])
def test_program_width_changes_no_token(device: str, block: int) -> None:
    # The width is a tuning knob (bench.engine.graph_profile step_block_*): more or fewer keys per row,
    # the same reduction. 3,000 logits: twelve programs of 256, or one program wider than the row.
    tuning = replace(DEFAULT_TUNING, step_block=block)
    rows = torch.randn(3, 3000)
    rows[0, [5, 2999]] = 9.0  # a tie across programs: the lower index
    rows[1, 2048] = float("nan")
    assert (
        _greedy(rows.to(device), tuning=tuning).tolist()
        == rows.argmax(dim=-1).tolist()
        == [5, 2048, rows[2].argmax().item()]
    )


def test_bad_inputs_are_refused(device: str) -> None:
    inputs = _inputs(device)
    logits = torch.randn(4, 100, device=device)
    counts = torch.zeros(4, dtype=torch.int32, device=device)
    ok = torch.zeros(4, dtype=torch.long, device=device)
    with pytest.raises(ValueError, match="out must be"):
        step_advance(
            logits, counts, ok, torch.zeros(3, dtype=torch.long, device=device), *inputs.values(), BS
        )
    with pytest.raises(ValueError, match="positions must be"):
        step_advance(
            logits, counts, ok, ok.clone(), inputs["positions"].int(), *list(inputs.values())[1:], BS
        )
    with pytest.raises(ValueError, match="counts must be"):
        step_advance(logits, counts.long(), ok, ok.clone(), *inputs.values(), BS)
    with pytest.raises(ValueError, match="one row per logits row"):
        step_advance(logits, counts, ok, ok.clone(), inputs["positions"], inputs["context_lens"][:2],
                     inputs["slot_mapping"], inputs["block_tables"], BS)  # fmt: skip
    with pytest.raises(ValueError, match="contiguous"):
        step_advance(logits.t().contiguous().t(), counts, ok, ok.clone(), *inputs.values(), BS)
