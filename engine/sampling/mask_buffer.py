"""The grammar mask's reused buffers: packed bitmasks on the host (pinned on CUDA) and their copy
on the device, so a step allocates nothing for its masks once the batch has been this big before.

    host:    [capacity, ceil(vocab / 32)] int32   filled by llguidance, row by row
    device:  [capacity, ceil(vocab / 32)] int32   (CUDA) a non-blocking copy of the rows in use
    rows:    [capacity] int32, host and device    the logits row of each mask (-1: skip it)

A host row is rewritten only once the last copy out of it has run (``wait_copied``): a pinned
copy is queued on the stream, so the host may be a step ahead of it.
"""

from __future__ import annotations

import torch

__all__ = ["MaskBuffer"]


class MaskBuffer:
    def __init__(self, device: torch.device, vocab: int) -> None:
        self.device = device
        self.vocab = vocab
        self.num_words = (vocab + 31) // 32
        self.row_bytes = self.num_words * 4
        self._pinned = device.type == "cuda"
        self.host = self._host_empty((0, self.num_words))
        self.host_rows = self._host_empty((0,))
        self._device: torch.Tensor | None = None
        self._device_rows: torch.Tensor | None = None
        self._copied: torch.cuda.Event | None = None

    def reserve(self, num_rows: int) -> None:
        """Room for ``num_rows`` masks; rows already filled keep their words."""
        if num_rows <= self.host.shape[0]:
            return
        capacity = max(num_rows, 2 * self.host.shape[0])
        self.wait_copied()
        host = self._host_empty((capacity, self.num_words))
        host[: self.host.shape[0]] = self.host
        self.host, self.host_rows = host, self._host_empty((capacity,))

    def host_row_ptr(self, row: int) -> int:
        return self.host.data_ptr() + row * self.row_bytes

    def wait_copied(self) -> None:
        """Until the last copy out of the host buffers has run (a no-op on CPU)."""
        if self._copied is not None:
            self._copied.synchronize()
            self._copied = None

    def apply_on_device(self, logits: torch.Tensor, target: list[int]) -> None:
        """Queue the copy of the first ``len(target)`` masks and their application to ``logits``."""
        n = len(target)
        self.wait_copied()  # host_rows is about to change
        self.host_rows[:n] = torch.tensor(target, dtype=torch.int32)
        if self._device is None or self._device.shape[0] < self.host.shape[0]:
            self._device = torch.empty(self.host.shape, dtype=torch.int32, device=self.device)
            self._device_rows = torch.empty(self.host.shape[0], dtype=torch.int32, device=self.device)
        assert self._device_rows is not None
        self._device[:n].copy_(self.host[:n], non_blocking=True)
        self._device_rows[:n].copy_(self.host_rows[:n], non_blocking=True)
        self._copied = torch.cuda.Event()  # type: ignore[no-untyped-call]
        self._copied.record()
        # Imported here: nothing in engine.kernels is imported on CPU (engine/kernels/__init__.py).
        from engine.kernels.token_bitmask import apply_token_bitmask

        apply_token_bitmask(logits, self._device[:n], self._device_rows[:n])

    def _host_empty(self, shape: tuple[int, ...]) -> torch.Tensor:
        return torch.empty(shape, dtype=torch.int32, pin_memory=self._pinned)
