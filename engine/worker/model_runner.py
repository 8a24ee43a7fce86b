"""Runs one hosted model over its share of a scheduler step and returns next-token logits.

Inputs are the scheduled sequences' new tokens laid end to end (see
``engine.attention_backends.metadata``); only sequences whose step reaches their last known token get a
logits row, in the order they were scheduled. On CUDA the model runs as its fused step
(``engine.fused_step``), with the engine's ``CudaTuning``; pure decode steps replay captured graphs
(``engine.worker.cuda_graph_runner``), and so does a lone sequence's short prefill
(``engine.worker.prefill_graphs``). A step of decodes and a few short prefill chunks (a serving
load's usual step when prompts arrive) is split: the decode graph for the decode rows, then one
prefill-graph replay per chunk. Every other step runs eagerly. A decode row whose input token
is still on the device (asynchronous scheduling) names its row in the previous step's sampled
tokens, and the runner scatters those into its inputs on the device.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch

from engine.attention_backends.metadata import AttentionMetadata
from engine.core.scheduler import ScheduledSeq
from engine.loading.hosted_model import HostedModel
from engine.tuning import DEFAULT_TUNING, CudaTuning
from engine.worker.cuda_graph_runner import CudaGraphRunner
from engine.worker.device_transfer import scatter_rows, to_device
from engine.worker.prefill_graphs import PrefillGraphs

if TYPE_CHECKING:
    from engine.fused_step import FusedStep

__all__ = ["ModelRunner", "RunnerOutput", "split_step"]


class RunnerOutput(NamedTuple):
    logits: torch.Tensor
    """[num sampling items, vocab_size] float32."""
    argmax: torch.Tensor | None = None
    """[num sampling items] int64: the logits' greedy argmax, when the decode graph computed it."""


class ModelRunner:
    def __init__(
        self,
        hosted: HostedModel,
        block_size: int,
        device: torch.device,
        *,
        cuda_graphs: bool = False,
        fused: bool = True,
        max_num_seqs: int = 64,
        max_prefill_graph_tokens: int = 1024,
        tuning: CudaTuning = DEFAULT_TUNING,
    ) -> None:
        self.hosted = hosted
        self.tuning = tuning
        self.block_size = block_size
        self.device = device
        self.fused: FusedStep | None = None
        """The model's fused CUDA step; None on CPU or without ``fused`` (tensor parallel), where
        the model's own forward runs."""
        self.graphs: CudaGraphRunner | None = None
        self.prefill_graphs: PrefillGraphs | None = None
        if device.type == "cuda" and fused:
            from engine.fused_step import FusedStep  # imports the kernels: CUDA only

            self.fused = FusedStep(hosted.model, tuning)  # type: ignore[arg-type]
        if cuda_graphs and self.fused is not None:
            self.graphs = CudaGraphRunner(
                self.fused,
                max_num_seqs=max_num_seqs,
                max_blocks=-(-hosted.max_model_len // block_size),
                block_size=block_size,
                device=device,
                tuning=tuning,
            )
            self.graphs.capture_all()
            self.prefill_graphs = PrefillGraphs(
                self.fused,
                max_blocks=-(-hosted.max_model_len // block_size),
                block_size=block_size,
                device=device,
                max_tokens=min(hosted.max_model_len, max_prefill_graph_tokens),
            )
            self.prefill_graphs.capture_all()

    @torch.inference_mode()
    def execute(
        self,
        items: list[ScheduledSeq],
        pending: torch.Tensor | None = None,
        sources: list[int] | None = None,
    ) -> RunnerOutput:
        """The sampling items' logits (and greedy argmax, from a greedy decode graph).

        pending: [rows] int64 on the device, the previous step's sampled tokens; sources[i] >= 0
        says item i's (single) input token is ``pending[sources[i]]``.
        """
        if self.graphs is not None and self._is_graph_step(self.graphs, items):
            return self._execute_graph(self.graphs, items, pending, sources)
        if self.prefill_graphs is not None and self._is_prefill_graph_step(
            self.prefill_graphs, items, sources
        ):
            item = items[0]
            end = item.start + item.num_new_tokens
            logits = self.prefill_graphs.run(
                item.seq.token_ids[item.start : end], item.start, item.seq.block_ids
            )
            return RunnerOutput(logits)
        if self.graphs is not None and self.prefill_graphs is not None:
            split = split_step(
                items, sources, self.graphs, self.prefill_graphs, self.tuning.split_mixed_max_prefills
            )
            if split is not None:
                return self._execute_split(self.graphs, self.prefill_graphs, items, split, pending, sources)
        token_ids, positions, meta = self._prepare(items)
        if pending is not None and sources is not None:
            dst = [meta.host_query_starts[i] for i, s in enumerate(sources) if s >= 0]
            scatter_rows(token_ids, dst, pending, [s for s in sources if s >= 0])
        last = [meta.host_query_starts[i + 1] - 1 for i, item in enumerate(items) if item.is_sampling]

        def sampling_rows(hidden: torch.Tensor) -> torch.Tensor:
            return hidden[to_device(last, torch.long, self.device)]

        if self.fused is not None:
            fused_hidden = self.fused.forward(token_ids, positions, meta)
            if not last:
                return self._no_logits()
            return RunnerOutput(self.fused.logits(fused_hidden, sampling_rows))
        hidden = self.hosted.model(token_ids, positions, meta)  # [num_tokens, hidden]
        if not last:
            return self._no_logits()
        return RunnerOutput(self.hosted.model.compute_logits(sampling_rows(hidden)))  # type: ignore[operator]

    def _no_logits(self) -> RunnerOutput:
        return RunnerOutput(torch.empty(0, self.hosted.config.vocab_size, device=self.device))

    @staticmethod
    def _is_prefill_graph_step(
        graphs: PrefillGraphs, items: list[ScheduledSeq], sources: list[int] | None
    ) -> bool:
        """One sequence's last prefill chunk (it samples), short enough for a captured bucket, with
        every input token on the host (no placeholder: those only precede a decode step)."""
        if len(items) != 1 or (sources is not None and sources[0] >= 0):
            return False
        item = items[0]
        return item.is_sampling and 1 < item.num_new_tokens <= graphs.max_tokens

    @staticmethod
    def _is_graph_step(graphs: CudaGraphRunner, items: list[ScheduledSeq]) -> bool:
        if not graphs.fits(len(items)):
            return False
        return all(item.num_new_tokens == 1 and item.is_sampling for item in items)

    def _execute_graph(
        self,
        graphs: CudaGraphRunner,
        items: list[ScheduledSeq],
        pending: torch.Tensor | None,
        sources: list[int] | None,
    ) -> RunnerOutput:
        bs = self.block_size
        positions = [item.start for item in items]
        scatter = None
        if pending is not None and sources is not None:
            dst = [i for i, s in enumerate(sources) if s >= 0]
            scatter = (dst, pending, [s for s in sources if s >= 0])
        logits = graphs.run(
            token_ids=[_decode_input_id(item) for item in items],
            pending=scatter,
            positions=positions,
            slots=[
                item.seq.block_ids[p // bs] * bs + p % bs for item, p in zip(items, positions, strict=True)
            ],
            block_tables=[item.seq.block_ids for item in items],
        )
        return RunnerOutput(logits, graphs.greedy)

    def _execute_split(
        self,
        graphs: CudaGraphRunner,
        prefill_graphs: PrefillGraphs,
        items: list[ScheduledSeq],
        split: tuple[list[int], list[int]],
        pending: torch.Tensor | None,
        sources: list[int] | None,
    ) -> RunnerOutput:
        decodes, prefills = split
        decode_sources = [sources[i] for i in decodes] if sources is not None else None
        # The decode graph's rows are a view of its output, and a prefill replay's [1, vocab] may
        # share memory with the next replay's: each is copied out (in stream order) before the next.
        parts = [self._execute_graph(graphs, [items[i] for i in decodes], pending, decode_sources).logits]
        order = list(decodes)
        for i in prefills:
            item = items[i]
            end = item.start + item.num_new_tokens
            logits = prefill_graphs.run(item.seq.token_ids[item.start : end], item.start, item.seq.block_ids)
            if item.is_sampling:
                parts.append(logits.clone())
                order.append(i)
        rows = torch.cat(parts)
        sampling = [i for i, item in enumerate(items) if item.is_sampling]
        if order != sampling:
            at = {i: k for k, i in enumerate(order)}
            rows = rows[to_device([at[i] for i in sampling], torch.long, self.device)]
        return RunnerOutput(rows)

    def _prepare(self, items: list[ScheduledSeq]) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata]:
        bs = self.block_size
        token_ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        starts = [0]
        context_lens: list[int] = []
        for item in items:
            seq, end = item.seq, item.start + item.num_new_tokens
            token_ids.extend(_input_ids(item))
            span = range(item.start, end)
            positions.extend(span)
            slots.extend(seq.block_ids[p // bs] * bs + p % bs for p in span)
            starts.append(starts[-1] + item.num_new_tokens)
            context_lens.append(end)
        max_blocks = max(len(item.seq.block_ids) for item in items)
        tables = [item.seq.block_ids + [0] * (max_blocks - len(item.seq.block_ids)) for item in items]

        def tensor(values: list[int] | list[list[int]], dtype: torch.dtype) -> torch.Tensor:
            return to_device(values, dtype, self.device)

        meta = AttentionMetadata(
            slot_mapping=tensor(slots, torch.long),
            block_tables=tensor(tables, torch.int32),
            context_lens=tensor(context_lens, torch.int32),
            query_starts=tensor(starts, torch.int32),
            block_size=bs,
            host_query_starts=tuple(starts),
            host_context_lens=tuple(context_lens),
        )
        return tensor(token_ids, torch.long), tensor(positions, torch.long), meta


def _input_ids(item: ScheduledSeq) -> list[int]:
    """The item's input tokens, with 0 for a pending one (``Sequence.num_pending_tokens``), which
    is overwritten on the device from ``pending`` before the model reads it."""
    known = item.seq.token_ids[item.start : item.start + item.num_new_tokens]
    return known + [0] * (item.num_new_tokens - len(known))


def _decode_input_id(item: ScheduledSeq) -> int:
    """``_input_ids`` of a one-token item, without the lists (every decode step, every row)."""
    token_ids = item.seq.token_ids
    return token_ids[item.start] if item.start < len(token_ids) else 0


def split_step(
    items: list[ScheduledSeq],
    sources: list[int] | None,
    graphs: CudaGraphRunner,
    prefill_graphs: PrefillGraphs,
    max_prefills: int,
) -> tuple[list[int], list[int]] | None:
    """(decode rows, prefill chunks) as item indices, when a step of both runs as the decode graph
    plus one prefill replay per chunk: at least one decode, 1..``max_prefills`` chunks of 2 to
    ``prefill_graphs.max_tokens`` tokens read from the host, no other kind of item."""
    decodes: list[int] = []
    prefills: list[int] = []
    for i, item in enumerate(items):
        if item.num_new_tokens == 1 and item.is_sampling:
            decodes.append(i)
        elif 1 < item.num_new_tokens <= prefill_graphs.max_tokens and (sources is None or sources[i] < 0):
            prefills.append(i)
        else:
            return None
    if not decodes or not 0 < len(prefills) <= max_prefills or not graphs.fits(len(decodes)):
        return None
    return decodes, prefills
