"""Iteration-level scheduling of every hosted model's sequences over one shared KV pool.

Priority: a smaller ``priority`` value is more urgent (vLLM's convention; it arrives as
``GenerateRequest.priority``, default 0); ties go to the earlier arrival. Each step has a token
budget (``max_num_batched_tokens``), filled in this order::

    | decodes (1 token each) | running prefill chunks | admitted prompts' first chunks |
      priority order           priority order           most urgent class, round-robin
    '------------------------- at most max_num_batched_tokens ------------------------'
      each prefill chunk at most long_prefill_token_threshold, unless it is alone

Chunked prefill: a prompt's tokens are computed over as many steps as the budget needs, so a
long arrival never holds up a step of the streams already decoding: they are scheduled first
and get their token every step. While any other sequence is running or waiting, one prefill
chunk takes at most ``long_prefill_token_threshold`` tokens, so the rest of the budget goes to a
later arrival's prefill and the step stays short; a sequence alone takes the whole budget (there
is nobody to protect, and each extra step costs a launch). Chunking changes no token: a chunk
attends to the KV of every earlier chunk in the cache, as a decode does.

1. Running sequences go first (decodes before prefill chunks, each group in priority order); each
   gets ``min(uncomputed tokens, budget left, chunk cap)`` tokens. When the pool cannot give a
   running sequence its next block, the victim is the least urgent, latest-arriving sequence
   among those not yet scheduled this step (possibly the sequence itself) and those already
   scheduled that are strictly less urgent than it (their share of the step is taken back). It
   is preempted by recompute: blocks freed, tokens kept, back to waiting.
2. A step that preempted in (1) admits nobody. Otherwise waiting sequences are admitted most
   urgent class first; within a class, round-robin across models, one per model per turn,
   starting from a different model each step, so that a flood on one model cannot starve
   another of equal priority. Within a model the waiting order is (priority, arrival). An
   admitted sequence starts with its first chunk after its cached prefix.
3. A waiting sequence that finds the running cap reached or too few free blocks preempts
   running sequences strictly less urgent than itself, least urgent and latest-arriving first,
   as few as make room (for its first chunk), and none at all when even all of them would not.
   Never one of equal or higher urgency, so preemption follows a strict order and cannot cycle.

Against thrash: no sequence preempted in a step is readmitted in that step (after (1) nobody
is; after (3) nothing of the victim's class or less urgent is), and a victim keeps its arrival,
so it re-enters at the front of its class in its model's queue. Once a waiting sequence finds no
room, nothing less urgent is admitted that step, so nothing less urgent takes blocks only to be
preempted by it next step.

Across models priority is global, because the pool and the cap are shared: a flood of urgent
requests on model A preempts and then holds back less urgent work on model B until A's backlog
no longer needs the room; B resumes, recomputing, after. Fairness across models holds within a
priority class: round-robin admission, and no sequence preempts one of equal priority.
Plain Python: no torch.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

from engine.core.kv_cache_manager import KVCacheManager
from engine.core.sequence import Sequence, SequenceStatus

__all__ = ["ScheduledSeq", "Scheduler", "SchedulerOutput"]


class ScheduledSeq(NamedTuple):
    """One sequence's share of a step: compute tokens [start, start + num_new_tokens).

    A named tuple rather than a frozen dataclass: one is made per running sequence per step,
    and a tuple is made several times faster."""

    seq: Sequence
    start: int
    num_new_tokens: int
    is_sampling: bool
    """The step reaches the end of the known tokens, so it samples the next one."""

    @classmethod
    def of(cls, seq: Sequence, num_new_tokens: int) -> ScheduledSeq:
        start = seq.num_computed_tokens
        return cls(seq, start, num_new_tokens, start + num_new_tokens == seq.num_tokens)

    @property
    def reads_pending(self) -> bool:
        """Its input reaches a token still on the device (asynchronous scheduling): the runner
        takes that one from the previous step's sampled tokens."""
        return self.start + self.num_new_tokens > len(self.seq.token_ids)


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
        self,
        kv: KVCacheManager,
        models: list[str],
        *,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        long_prefill_token_threshold: int | None = None,
    ) -> None:
        self.kv = kv
        self.models = list(models)
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.long_prefill_token_threshold = long_prefill_token_threshold
        """Most tokens of one prefill chunk while other sequences have work; None: no cap but the budget."""
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

    def num_by_model(self) -> dict[str, tuple[int, int]]:
        """model -> (running, waiting) sequences."""
        running = {m: 0 for m in self.models}
        for seq in self.running:
            running[seq.model] = running.get(seq.model, 0) + 1
        return {m: (running.get(m, 0), len(self._waiting.get(m, ()))) for m in self.models}

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
        chunk = self._max_chunk_tokens()
        budget = self._schedule_running(out, self.max_num_batched_tokens, chunk)
        if not out.preempted:
            self._admit_waiting(out, budget, chunk)
        return out

    def _max_chunk_tokens(self) -> int:
        """The most tokens one prefill chunk may take this step."""
        threshold = self.long_prefill_token_threshold
        if threshold is None or len(self.running) + self.num_waiting <= 1:
            return self.max_num_batched_tokens
        return threshold

    def update(self, out: SchedulerOutput) -> None:
        """After the step ran: its tokens are computed; index blocks that became full."""
        for item in out.scheduled:
            item.seq.num_computed_tokens = item.start + item.num_new_tokens
            self.kv.commit(item.seq)

    def _schedule_running(self, out: SchedulerOutput, budget: int, chunk: int) -> int:
        pending = deque(
            sorted(self.running, key=lambda s: (s.num_tokens - s.num_computed_tokens > 1, s.sort_key))
        )
        scheduled = out.scheduled
        while pending and budget > 0:
            seq = pending.popleft()
            num_uncomputed = seq.num_tokens - seq.num_computed_tokens
            num_new = min(num_uncomputed, budget, chunk)
            # A decode (its one new token is its last, so it samples): the path of every step. Not
            # a prefill chunk that the budget cut to one token: that one samples nothing.
            if num_uncomputed == 1 and self.kv.allocate(seq, 1):
                scheduled.append(ScheduledSeq(seq, seq.num_computed_tokens, 1, True))
                budget -= 1
                continue
            while not self.kv.allocate(seq, num_new):
                less_urgent = [i.seq for i in out.scheduled if i.seq.priority > seq.priority]
                victim = max([seq, *pending, *less_urgent], key=lambda s: s.sort_key)
                if victim is seq and len(self.running) == 1:
                    # Nothing else holds blocks: this sequence alone outgrew the pool.
                    self.finish(seq, SequenceStatus.FINISHED_LENGTH)
                    out.finished.append(seq)
                    break
                if victim in pending:
                    pending.remove(victim)
                budget += self._evict(out, victim)
                if victim is seq:
                    break
            else:
                out.scheduled.append(ScheduledSeq.of(seq, num_new))
                budget -= num_new
        return budget

    def _admit_waiting(self, out: SchedulerOutput, budget: int, chunk: int) -> None:
        n = len(self.models)
        order = [self.models[(self._next_model + k) % n] for k in range(n)]
        self._next_model = (self._next_model + 1) % n
        active = [m for m in order if self._waiting[m]]
        ceiling: int | None = None  # the least urgent priority still admissible this step
        while active and budget > 0:
            urgent = min(self._head(m).priority for m in active)
            if ceiling is not None and urgent > ceiling:
                return
            for model in [m for m in active if self._head(m).priority == urgent]:
                seq = self._head(model)
                cached = self.kv.find_cached_prefix(seq)
                num_new = min(seq.num_tokens - len(cached) * self.kv.block_size, budget, chunk)
                victims = self._victims_for(seq, num_new, cached)
                if victims is not None:
                    for victim in victims:
                        budget += self._evict(out, victim)
                        ceiling = _lower(ceiling, victim.priority - 1)
                if victims is None or not self.kv.allocate(seq, num_new, cached):
                    # No room, even by preemption: nobody less urgent may take what it waits for.
                    active.remove(model)
                    ceiling = _lower(ceiling, urgent)
                    continue
                queue = self._waiting[model]
                heapq.heappop(queue)
                seq.status = SequenceStatus.RUNNING
                self.running.append(seq)
                out.scheduled.append(ScheduledSeq.of(seq, num_new))
                budget -= num_new
                if not queue:
                    active.remove(model)
                if budget == 0:
                    return

    def _victims_for(self, seq: Sequence, num_new: int, cached: list[int]) -> list[Sequence] | None:
        """The running sequences to preempt so that waiting ``seq`` fits under the cap and in the
        pool: the fewest of those strictly less urgent, least urgent and latest first; [] when it
        fits already, None when even all of them would not make room."""
        num_slots_short = len(self.running) + 1 - self.max_num_seqs
        num_blocks_short = self.kv.num_blocks_short(seq, num_new, cached)
        if num_slots_short <= 0 and num_blocks_short <= 0:
            return []
        candidates = sorted(
            (s for s in self.running if s.priority > seq.priority), key=lambda s: s.sort_key, reverse=True
        )
        release = self.kv.release(keep=cached)
        for k, victim in enumerate(candidates, start=1):
            num_freed = release.add(victim)
            if k >= num_slots_short and num_freed >= num_blocks_short:
                return candidates[:k]
        return None

    def _head(self, model: str) -> Sequence:
        return self._waiting[model][0][1]

    def _evict(self, out: SchedulerOutput, seq: Sequence) -> int:
        """Preempt a running sequence, taking back any share of this step it had; returns the
        tokens that gives back to the budget."""
        refund = 0
        for k, item in enumerate(out.scheduled):
            if item.seq is seq:
                refund = item.num_new_tokens
                del out.scheduled[k]
                break
        self._preempt(seq)
        out.preempted.append(seq)
        return refund

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.kv.free(seq)
        seq.num_computed_tokens = 0
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.add(seq)


def _lower(ceiling: int | None, priority: int) -> int:
    return priority if ceiling is None else min(ceiling, priority)
