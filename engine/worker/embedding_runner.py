"""Runs an embedding model over whole inputs with no KV cache and returns one vector per input.

Decoder embedding models (Qwen3-Embedding and kin) embed an input as the final hidden state of
its last token (the tokenizer appends an end token for this), L2-normalised. The inputs are laid
end to end and each attends causally to itself (``engine.attention_backends.dense``): nothing is
read from or written to the shared KV pool, so an embedding batch never takes blocks from
generation.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

from engine.attention_backends.dense import DenseMetadata
from engine.loading.hosted_model import HostedModel
from engine.worker.device_transfer import to_device

__all__ = ["EmbeddingRunner", "truncate"]


class EmbeddingRunner:
    def __init__(self, hosted: HostedModel, device: torch.device) -> None:
        self.hosted = hosted
        self.device = device

    @torch.inference_mode()
    def embed(self, inputs: list[list[int]]) -> torch.Tensor:
        """[len(inputs), hidden_size] float32 on the host, each row of unit L2 norm."""
        starts = [0, *itertools.accumulate(len(ids) for ids in inputs)]
        token_ids = to_device([t for ids in inputs for t in ids], torch.long, self.device)
        positions = to_device([p for ids in inputs for p in range(len(ids))], torch.long, self.device)
        hidden = self.hosted.model(token_ids, positions, DenseMetadata(tuple(starts)))  # [num_tokens, hidden]
        last = hidden[to_device([e - 1 for e in starts[1:]], torch.long, self.device)].float()
        return F.normalize(last, dim=-1).cpu()


def truncate(vectors: torch.Tensor, dimensions: int | None) -> torch.Tensor:
    """Matryoshka truncation: the leading ``dimensions`` values of each row, re-normalised."""
    # vectors: [n, hidden] -> [n, dimensions]
    if dimensions is None or dimensions == vectors.shape[-1]:
        return vectors
    return F.normalize(vectors[:, :dimensions], dim=-1)
