"""What a producer handed one stream since its reader last asked: the reader takes it all at once.

This is where deltas of several steps meet when a reader falls behind, so the reader's next frame
carries them together (``engine.serving.frames.coalesced``). Event-loop only: a thread hands items
over with ``loop.call_soon_threadsafe(inbox.put, item)``.
"""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

__all__ = ["Inbox"]

T = TypeVar("T")


class Inbox(Generic[T]):
    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: list[T] = []
        self._waiter: asyncio.Future[None] | None = None

    def put(self, item: T) -> None:
        self._items.append(item)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def put_all(self, items: list[T]) -> None:
        self._items += items
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def take(self) -> list[T]:
        """Everything put since the last take, waiting for the first item if there is none."""
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        items, self._items = self._items, []
        return items
