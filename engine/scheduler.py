"""Iteration-level scheduling of every hosted model's sequences over one shared KV pool.

Each step has a token budget. Running sequences go first (decodes before prefill chunks, each
group in priority order); each gets ``min(uncomputed tokens, budget left)`` tokens, so a long
prompt is prefilled in chunks across steps while decodes keep flowing. When the pool cannot give
a running sequence its next block, the lowest-priority, latest-arriving running sequence not yet
scheduled this step is preempted by recompute (its blocks freed, its tokens kept, back to
waiting), possibly the sequence itself. A step that preempted admits nobody; otherwise waiting
sequences are admitted round-robin across models, one per model per turn, starting from a
different model each step, so that a flood on one model cannot starve another. Within a model
the waiting order is (priority, arrival): smaller priority values first. Plain Python: no torch.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from engine.kv_cache_manager import KVCacheManager
from engine.sequence import Sequence, SequenceStatus

__all__ = ["ScheduledSeq", "Scheduler", "SchedulerOutput"]


@dataclass(frozen=True, slots=True)
class ScheduledSeq:
    """One sequence's share of a step: compute tokens [start, start + num_new_tokens)."""

    seq: Sequence
    start: int
    num_new_tokens: int
    is_sampling: bool
    """The step reaches the end of the known tokens, so it samples the next one."""

    @classmethod
    def of(cls, seq: Sequence, num_new_tokens: int) -> ScheduledSeq:
        start = seq.num_computed_tokens
        return cls(seq, start, num_new_tokens, start + num_new_tokens == seq.num_tokens)


@dataclass(slots=True)
class SchedulerOutput:
    scheduled: list[ScheduledSeq] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    finished: list[Sequence] = field(default_factory=list)
    """Sequences ended by the scheduler itself (one that outgrew the whole pool)."""

    @property
    def num_batched_tokens(self) -> int:
        return sum(s.num_new_tokens for s in self.scheduled)

    def by_model(self) -> dict[str, list[ScheduledSeq]]:
        groups: dict[str, list[ScheduledSeq]] = {}
        for item in self.scheduled:
            groups.setdefault(item.seq.model, []).append(item)
        return groups


class Scheduler:
    """Continuous batching with chunked prefill, priorities and cross-model fairness."""

    def __init__(
        self, kv: KVCacheManager, models: list[str], *, max_num_seqs: int, max_num_batched_tokens: int
    ) -> None:
        self.kv = kv
        self.models = list(models)
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.running: list[Sequence] = []
        self._waiting: dict[str, list[tuple[tuple[int, int, int], Sequence]]] = {m: [] for m in models}
        self._next_model = 0
        self.num_preemptions = 0

    @property
    def num_waiting(self) -> int:
        return sum(len(q) for q in self._waiting.values())

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def has_work(self) -> bool:
        return bool(self.running) or self.num_waiting > 0

    def waiting(self, model: str) -> list[Sequence]:
        """A model's waiting sequences in service order."""
        return [seq for _, seq in sorted(self._waiting[model])]

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        heapq.heappush(self._waiting[seq.model], (seq.sort_key, seq))

    def finish(self, seq: Sequence, status: SequenceStatus) -> None:
        """End a sequence wherever it is, returning its blocks at once."""
        if seq in self.running:
            self.running.remove(seq)
        queue = self._waiting[seq.model]
        entry = (seq.sort_key, seq)
        if entry in queue:
            queue.remove(entry)
            heapq.heapify(queue)
        self.kv.free(seq)
        seq.status = status

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self._schedule_running(out, self.max_num_batched_tokens)
        if not out.preempted:
            self._admit_waiting(out, budget)
        return out

    def update(self, out: SchedulerOutput) -> None:
        """After the step ran: its tokens are computed; index blocks that became full."""
        for item in out.scheduled:
            item.seq.num_computed_tokens = item.start + item.num_new_tokens
            self.kv.commit(item.seq)

    def _schedule_running(self, out: SchedulerOutput, budget: int) -> int:
        queue = sorted(self.running, key=lambda s: (s.num_uncomputed_tokens > 1, s.sort_key))
        i = 0
        while i < len(queue) and budget > 0:
            seq = queue[i]
            num_new = min(seq.num_uncomputed_tokens, budget)
            while not self.kv.allocate(seq, num_new):
                victim = max(queue[i:], key=lambda s: s.sort_key)
                queue.remove(victim)
                if victim is seq and len(self.running) == 1:
                    # Nothing else holds blocks: this sequence alone outgrew the pool.
                    self.finish(seq, SequenceStatus.FINISHED_LENGTH)
                    out.finished.append(seq)
                    break
                self._preempt(victim)
                out.preempted.append(victim)
                if victim is seq:
                    break
            else:
                out.scheduled.append(ScheduledSeq.of(seq, num_new))
                budget -= num_new
                i += 1
        return budget

    def _admit_waiting(self, out: SchedulerOutput, budget: int) -> None:
        n = len(self.models)
        order = [self.models[(self._next_model + k) % n] for k in range(n)]
        self._next_model = (self._next_model + 1) % n
        active = [m for m in order if self._waiting[m]]
        while active and budget > 0 and len(self.running) < self.max_num_seqs:
            for model in list(active):
                queue = self._waiting[model]
                seq = queue[0][1]
                cached = self.kv.find_cached_prefix(seq)
                num_new = min(seq.num_tokens - len(cached) * self.kv.block_size, budget)
                if not self.kv.allocate(seq, num_new, cached):
                    active.remove(model)
                    continue
                heapq.heappop(queue)
                seq.status = SequenceStatus.RUNNING
                self.running.append(seq)
                out.scheduled.append(ScheduledSeq.of(seq, num_new))
                budget -= num_new
                if not queue:
                    active.remove(model)
                if budget == 0 or len(self.running) >= self.max_num_seqs:
                    return

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.kv.free(seq)
        seq.num_computed_tokens = 0
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.add(seq)
