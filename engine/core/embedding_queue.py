"""Embedding requests waiting for the KV-free batch path, and how each batch is cut.

An embedding request is a list of inputs (token ids), each embedded by one forward over the whole
input with nothing kept afterwards. The engine runs at most one batch between two generation
steps, so a batch's token count bounds how long decoding streams wait for it::

    queue:  [ r1: in0 in1 in2 | r2: in0 | r3: in0 in1 ]   (oldest first)
    batch:    r1.in0 r1.in1 ... while the budget lasts, one model per batch

A batch always takes at least one input, so an input longer than the budget still runs (alone).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

__all__ = ["EmbeddingJob", "EmbeddingQueue"]


@dataclass(slots=True)
class EmbeddingJob:
    request_id: str
    model: str
    inputs: list[list[int]]
    dimensions: int | None = None
    """Truncate each vector to this many leading values, then re-normalise (Matryoshka)."""
    vectors: list[list[float]] = field(default_factory=list)
    """Filled in input order as batches complete."""

    @property
    def num_tokens(self) -> int:
        return sum(len(ids) for ids in self.inputs)

    @property
    def is_done(self) -> bool:
        return len(self.vectors) == len(self.inputs)

    def __repr__(self) -> str:
        return f"EmbeddingJob(id={self.request_id!r}, model={self.model!r}, inputs={len(self.inputs)})"


class EmbeddingQueue:
    def __init__(self, max_batch_tokens: int) -> None:
        self.max_batch_tokens = max_batch_tokens
        self._jobs: deque[EmbeddingJob] = deque()

    @property
    def has_work(self) -> bool:
        return bool(self._jobs)

    def __contains__(self, request_id: str) -> bool:
        return any(job.request_id == request_id for job in self._jobs)

    def add(self, job: EmbeddingJob) -> None:
        self._jobs.append(job)

    def remove(self, request_id: str) -> bool:
        before = len(self._jobs)
        self._jobs = deque(job for job in self._jobs if job.request_id != request_id)
        return len(self._jobs) != before

    def next_batch(self) -> list[tuple[EmbeddingJob, int]]:
        """(job, input index) pairs of the next batch, oldest first, all of the oldest job's model."""
        if not self._jobs:
            return []
        model = self._jobs[0].model
        batch: list[tuple[EmbeddingJob, int]] = []
        num_tokens = 0
        for job in self._jobs:
            if job.model != model:
                continue
            # A batch completes before the next is cut: the job's next input is len(vectors).
            for index in range(len(job.vectors), len(job.inputs)):
                size = len(job.inputs[index])
                if batch and num_tokens + size > self.max_batch_tokens:
                    return batch
                batch.append((job, index))
                num_tokens += size
        return batch

    def pop_done(self) -> list[EmbeddingJob]:
        done = [job for job in self._jobs if job.is_done]
        if done:
            self._jobs = deque(job for job in self._jobs if not job.is_done)
        return done
