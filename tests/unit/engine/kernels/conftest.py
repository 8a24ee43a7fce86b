"""Kernel tests run the Triton kernels on CPU tensors through the interpreter when there is no GPU.

``TRITON_INTERPRET`` is read when a kernel is decorated, so it is set before any test module
imports ``engine.kernels``. On a CUDA machine the same tests run compiled, on the GPU.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"


@pytest.fixture
def device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(autouse=True)
def _seeded() -> None:
    # Fresh but reproducible inputs per test, whatever ran before it.
    torch.manual_seed(0)
