"""One pipeline stage's share of a step: its layers over every micro-batch, activations passed on.

Every rank runs the same plan (``engine.worker.step_plan``) and cuts the step's sequences into
the same micro-batches, up to one per stage, so each rank knows every tensor's shape before it
arrives. Stage ``s`` runs micro-batch ``m`` while stage ``s + 1`` runs ``m - 1``::

    stage 0   [mb0][mb1][mb2]                 -> activations to stage 1, as soon as each is done
    stage 1        [mb0][mb1][mb2]            -> activations to stage 2
    stage 2             [mb0][mb1][mb2]       -> logits to rank 0, which samples

A sequence stays in one micro-batch: its attention reads only its own KV, which each stage keeps
for its own layers under the block ids rank 0 chose. Sends do not wait for their receiver
(``isend``), so no stage waits on the next one before it starts its next micro-batch; a stage
waits for its sends at the end of the step. The last stage's tensor-parallel rank 0 sends each
micro-batch's logits (float32, [sampling rows, vocab]) to rank 0, which joins them in order.
A peer that died fails the receive at once, one that hangs after ``distributed_timeout_s``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from engine.core.scheduler import ScheduledSeq
from engine.worker.distributed import RankPlace
from engine.worker.model_runner import ModelRunner, RunnerOutput

__all__ = ["PipelineRunner", "micro_batches"]


def micro_batches(items: list[ScheduledSeq], num_stages: int) -> list[list[ScheduledSeq]]:
    """Up to ``num_stages`` contiguous slices of the step's sequences, of near-equal counts (the
    scheduled order is kept, so joined logits stay in the order rank 0 samples them). By count,
    not tokens: decode rows, the steady state, are one token each."""
    n = min(num_stages, len(items))
    size, extra = divmod(len(items), n) if n else (0, 0)
    batches, start = [], 0
    for i in range(n):
        end = start + size + (i < extra)
        batches.append(items[start:end])
        start = end
    return batches


class PipelineRunner(ModelRunner):
    """A ``ModelRunner`` for one stage of a pipeline (``pipeline_parallel_size`` > 1); runs eagerly."""

    def __init__(self, *args: object, place: RankPlace, **kwargs: object) -> None:
        super().__init__(*args, fused=False, **kwargs)  # type: ignore[arg-type]
        self.place = place

    @torch.inference_mode()
    def execute(
        self,
        items: list[ScheduledSeq],
        pending: torch.Tensor | None = None,
        sources: list[int] | None = None,
    ) -> RunnerOutput:
        """On rank 0 the step's logits, in the scheduled order; elsewhere none."""
        if pending is not None:
            raise ValueError("a pipeline stage reads every input token from the plan")
        here = self.place
        batches = micro_batches(items, here.pp_size)
        sends = [self._run_batch(batch) for batch in batches]
        for work in sends:
            if work is not None:
                work.wait()
        if here.rank != 0:
            return self._no_logits()
        vocab = self.hosted.config.vocab_size
        parts = []
        for batch in batches:
            rows = sum(item.is_sampling for item in batch)
            if rows:
                logits = torch.empty(rows, vocab, dtype=torch.float32, device=self.device)
                dist.recv(logits, here.last_stage_rank)
                parts.append(logits)
        if not parts:
            return self._no_logits()
        return RunnerOutput(parts[0] if len(parts) == 1 else torch.cat(parts))

    def _run_batch(self, batch: list[ScheduledSeq]) -> dist.Work | None:
        """This stage's layers over one micro-batch; the send it started, if any."""
        here = self.place
        token_ids, positions, meta = self._prepare(batch)
        carried = None
        if not here.is_first_stage:
            hidden = self.hosted.config.hidden_size
            carried = torch.empty(2, len(positions), hidden, dtype=self.hosted.dtype, device=self.device)
            dist.recv(carried, here.prev_rank)
        out = self.hosted.model(token_ids, positions, meta, carried)
        if not here.is_last_stage:
            return dist.isend(out.contiguous(), here.next_rank)  # out: [2, num_tokens, hidden]
        last = [meta.host_query_starts[i + 1] - 1 for i, item in enumerate(batch) if item.is_sampling]
        if not last:
            return None
        rows = out[torch.tensor(last, dtype=torch.long, device=self.device)]
        logits = self.hosted.model.compute_logits(rows)  # type: ignore[operator]  # all-gathers the vocab
        if here.tp_rank != 0:
            return None
        return dist.isend(logits.contiguous(), 0)
