"""scatter_rows: the general gather-scatter and its one-copy fast path agree."""

from __future__ import annotations

import pytest
import torch

from engine.worker.device_transfer import scatter_rows, to_device


@pytest.mark.parametrize(
    ("dst_rows", "src_rows"),
    [
        ([0, 1, 2], [0, 1, 2]),  # one run, same rows: the copy
        ([2, 3], [2, 3]),  # a run not from 0
        ([0, 2], [0, 2]),  # same rows, not a run
        ([1, 0], [1, 0]),  # same rows, out of order
        ([0, 1], [1, 0]),  # other rows
        ([3], [0]),
        ([], []),
    ],
)
def test_every_row_lands_where_asked(dst_rows: list[int], src_rows: list[int]) -> None:
    dst = torch.full((5,), -1, dtype=torch.long)
    src = torch.arange(10, 15)
    scatter_rows(dst, dst_rows, src, src_rows)
    want = torch.full((5,), -1, dtype=torch.long)
    for d, s in zip(dst_rows, src_rows, strict=True):
        want[d] = src[s]
    assert torch.equal(dst, want)


def test_to_device_keeps_values_and_dtype() -> None:
    t = to_device([[1, 2], [3, 4]], torch.int32, torch.device("cpu"))
    assert t.dtype == torch.int32 and t.tolist() == [[1, 2], [3, 4]]
