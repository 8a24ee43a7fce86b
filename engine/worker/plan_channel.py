"""Rank 0's messages to the other tensor-parallel ranks, through the rendezvous store.

Each message is one msgpack value under a numbered key of the ``TCPStore`` that rank 0 serves
(``engine.worker.distributed.join``): rank 0 writes and never waits on a reader, so a rank that
is alive but stuck cannot block it (the step's collectives then time out instead); a reader
waits in short polls as long as the engine idles, and a store that went away (rank 0 died)
ends it. msgpack, not pickle: nothing read from the socket can run code.

Message ``n`` is deleted when ``n + 1`` is sent: by then every rank has read ``n`` (each took
part in the collectives of the step it described).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import msgspec
import torch.distributed as dist

__all__ = ["PlanChannel"]

_POLL = timedelta(seconds=5)


class PlanChannel:
    def __init__(self, store: Any) -> None:
        self._store = store
        self._n = 0

    def send(self, message: Any) -> None:
        """Rank 0: the next message (never blocks on the readers)."""
        self._store.set(f"plan/{self._n}", msgspec.msgpack.encode(message))
        if self._n:
            self._store.delete_key(f"plan/{self._n - 1}")
        self._n += 1

    def receive(self) -> Any:
        """Other ranks: the next message, however long rank 0 idles before sending it."""
        key = f"plan/{self._n}"
        while True:
            try:
                self._store.wait([key], _POLL)
                break
            except dist.DistStoreError:  # a timeout: rank 0 is idle; DistNetworkError: it is gone
                continue
        self._n += 1
        return msgspec.msgpack.decode(self._store.get(key))

    def put(self, key: str, value: Any) -> None:
        """One named value (start-up answers), read once by ``get``."""
        self._store.set(f"value/{key}", msgspec.msgpack.encode(value))

    def ready(self, keys: list[str]) -> bool:
        return bool(self._store.check([f"value/{k}" for k in keys]))

    def get(self, key: str) -> Any:
        """A value ``put`` by any rank, waiting for it like ``receive``."""
        full = f"value/{key}"
        while True:
            try:
                self._store.wait([full], _POLL)
                break
            except dist.DistStoreError:
                continue
        return msgspec.msgpack.decode(self._store.get(full))
