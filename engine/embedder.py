"""The engine's embedding side: validate inputs, queue them, run one bounded batch between steps.

Embedding models never enter the scheduler or the KV pool. ``LLMEngine`` calls ``run_batch``
once before each generation step, so a decoding stream waits for at most one batch of
``max_batch_tokens`` (``engine.core.embedding_queue``).
"""

from __future__ import annotations

import torch

from engine.core.embedding_queue import EmbeddingJob, EmbeddingQueue
from engine.errors import InvalidRequestError, PromptTooLongError
from engine.loading.hosted_model import HostedModel
from engine.worker.embedding_runner import EmbeddingRunner, truncate

__all__ = ["Embedder"]


class Embedder:
    def __init__(self, models: list[HostedModel], device: torch.device, *, max_batch_tokens: int) -> None:
        self.runners = {m.name: EmbeddingRunner(m, device) for m in models}
        self.queue = EmbeddingQueue(max_batch_tokens)
        self._done: list[EmbeddingJob] = []

    @property
    def has_work(self) -> bool:
        return self.queue.has_work

    def __contains__(self, request_id: str) -> bool:
        return request_id in self.queue

    @staticmethod
    def token_ids(hosted: HostedModel, text: str | list[int]) -> list[int]:
        """One input of an embedding model, tokenized and checked; raises before anything is queued."""
        ids = hosted.tokenizer.encode(text) if isinstance(text, str) else list(text)
        if not text or not ids:
            raise InvalidRequestError("input must not be empty", param="input")
        vocab = hosted.config.vocab_size
        if any(not isinstance(t, int) or not 0 <= t < vocab for t in ids):
            raise InvalidRequestError(f"input token ids must be in [0, {vocab})", param="input")
        if len(ids) > hosted.max_model_len:
            raise PromptTooLongError(
                f"input has {len(ids)} tokens; {hosted.name} allows at most {hosted.max_model_len}",
                param="input",
            )
        return ids

    def add(
        self, request_id: str, hosted: HostedModel, inputs: list[list[int]], dimensions: int | None
    ) -> EmbeddingJob:
        if not inputs:
            raise InvalidRequestError("input must not be empty", param="input")
        size = hosted.config.hidden_size
        if dimensions is not None and not 1 <= dimensions <= size:
            raise InvalidRequestError(
                f"dimensions must be between 1 and {size} for {hosted.name}", param="dimensions"
            )
        job = EmbeddingJob(request_id, hosted.name, inputs, dimensions)
        self.queue.add(job)
        return job

    def run_batch(self) -> None:
        batch = self.queue.next_batch()
        if not batch:
            return
        runner = self.runners[batch[0][0].model]
        vectors = runner.embed([job.inputs[i] for job, i in batch])  # [len(batch), hidden]
        for (job, _), vector in zip(batch, vectors, strict=True):
            job.vectors.append(truncate(vector[None], job.dimensions)[0].tolist())
        self._done.extend(self.queue.pop_done())

    def take(self) -> list[EmbeddingJob]:
        """Jobs finished since the last call."""
        done, self._done = self._done, []
        return done

    def abort(self, request_id: str) -> None:
        self.queue.remove(request_id)
