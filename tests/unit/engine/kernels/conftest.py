"""Kernel tests: fresh but reproducible inputs per test (``TRITON_INTERPRET`` and the ``device``
fixture come from ``tests/unit/engine/conftest.py``)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _seeded() -> None:
    # Fresh but reproducible inputs per test, whatever ran before it.
    torch.manual_seed(0)
