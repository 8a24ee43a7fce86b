"""One step whose sampled tokens may still be on the device.

With asynchronous scheduling (CUDA) the engine launches step N+1 before it reads step N's
tokens, so the host's work for a step (scheduling, staging inputs, detokenizing, stop checks)
overlaps the GPU's work on the next one::

    host:  schedule N+1 | launch N+1 | wait N | detokenize N | schedule N+2 | launch N+2 | wait N+1
    GPU:          ... step N ...     |         ... step N+1 ...            |      ... step N+2

Step N+1's decode rows read the tokens step N sampled straight from the device (the runner
scatters them into its inputs), while the host holds their places on the sequences
(``Sequence.hold_place``: counted, never written into ``token_ids``) until the tokens arrive.
A row whose sequence ended meanwhile (stop string, EOS, abort) is computed once for nothing
and dropped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from engine.core.scheduler import SchedulerOutput
from engine.core.sequence import Sequence
from engine.sampling import TokenLogprobs
from engine.worker.device_transfer import to_host

__all__ = ["InflightStep", "SampledRow"]


@dataclass(slots=True)
class SampledRow:
    seq: Sequence
    logprobs: TokenLogprobs | None
    is_held: bool = False
    """The sequence holds a place for this row's token (``Sequence.hold_place``), filled on arrival."""


@dataclass(slots=True)
class InflightStep:
    out: SchedulerOutput
    rows: list[SampledRow] = field(default_factory=list)
    tokens: torch.Tensor | None = None
    """[len(rows)] int64 on the device: the sampled tokens, in row order."""
    _host: torch.Tensor | None = None
    _ready: torch.cuda.Event | None = None
    row_of: dict[int, int] = field(default_factory=dict)
    """seq_id -> row index, for the next step's inputs."""
    wait_s: float = 0.0
    """How long the host waited for this step's tokens: ~0 means the GPU was waiting on the host."""

    def start_copy(self) -> None:
        """Queue the tokens' copy to the host behind the step that samples them."""
        if self.tokens is not None:
            self._host, self._ready = to_host(self.tokens)

    def token_ids(self) -> list[int]:
        """Wait for this step's tokens (only this step's: a later step may still be running)."""
        if self._host is None:
            return []
        if self._ready is not None:
            start = time.perf_counter()
            self._ready.synchronize()
            self.wait_s += time.perf_counter() - start
        values: list[int] = self._host.tolist()
        return values
