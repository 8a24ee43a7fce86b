"""One sequence of tokens being generated: the unit the scheduler and the KV cache manager track.

There is no prefill or decode phase. A sequence has ``num_tokens`` (prompt plus output so far)
and ``num_computed_tokens`` (tokens whose KV is in the cache), and every step the scheduler
hands it some of the difference::

    token_ids:  [p0 p1 p2 p3 p4 p5 p6 | o0 o1 o2]
                 '------ computed ------'  '-- new --'
                 num_computed_tokens = 7   num_tokens = 10

A step that brings ``num_computed_tokens`` up to ``num_tokens`` samples one more token. Preemption
by recompute drops the KV and resets ``num_computed_tokens`` to 0; the output so far is kept and
recomputed like prompt.

With asynchronous scheduling a sampled token may still be on the device when the next step is
planned. It is counted, not stored: ``num_pending_tokens`` places follow ``token_ids`` and count
in ``num_tokens``, so ``token_ids`` only ever holds real token ids::

    token_ids:  [p0 p1 p2 o0 o1] + 1 pending      num_tokens = 6
    hold_place()       a step sampled a token the host has not read yet
    fill_place(o2)     it arrived: token_ids gains o2, nothing is pending

Plain Python: no torch here.
"""

from __future__ import annotations

import enum
import itertools
from typing import Any

from engine.core.sampling_params import SamplingParams
from engine.errors import EngineError

__all__ = ["Sequence", "SequenceStatus"]

_seq_ids = itertools.count()


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED_STOPPED = "stop"
    FINISHED_LENGTH = "length"
    FINISHED_ABORTED = "abort"

    @property
    def is_finished(self) -> bool:
        return self not in _LIVE

    @property
    def finish_reason(self) -> str | None:
        return self.value if self.is_finished else None


_LIVE = (SequenceStatus.WAITING, SequenceStatus.RUNNING)
"""Statuses of a sequence not yet finished; a tuple: ``in`` tests identity before equality."""


class Sequence:
    """A prompt and its growing output, with its place in the KV cache."""

    def __init__(
        self,
        request_id: str,
        model: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        *,
        index: int = 0,
        cache_salt: str = "",
        priority: int = 0,
        arrival: int = 0,
    ) -> None:
        self.seq_id = next(_seq_ids)
        self.request_id = request_id
        self.index = index
        self.model = model
        self.params = params
        self.needs_host_tokens = params.logprobs is not None or params.uses_penalties
        """Sampling it reads back logprobs or the output so far: no step may be launched past it
        before its tokens are on the host (asynchronous scheduling). A grammar mask needs its last
        token too, but only after the next forward pass is queued (``LLMEngine._catch_up_grammars``)."""
        self.cache_salt = cache_salt
        """Starts its block-hash chain: only sequences with the same salt share cached blocks."""
        self.priority = priority
        """Smaller is served first (vLLM's convention); ties go to the earlier arrival."""
        self.arrival = arrival
        self.sort_key = (priority, arrival, self.seq_id)
        """Order of service: priority, then arrival, then creation (fixed for the sequence's life)."""
        self.status = SequenceStatus.WAITING
        self.num_prompt_tokens = len(prompt_token_ids)
        self.token_ids = list(prompt_token_ids)
        """Known tokens; grows only through ``append_token`` and ``fill_place``."""
        self.num_tokens = len(self.token_ids)
        """Prompt plus output, pending places included (an attribute: read for every sequence,
        every step)."""
        self.num_pending_tokens = 0
        """Sampled tokens not yet on the host (asynchronous scheduling); they follow ``token_ids``."""
        self.num_computed_tokens = 0
        self.num_cached_tokens = 0
        """Prompt tokens served from the prefix cache at the last admission (for stats)."""
        self.block_ids: list[int] = []
        self.block_hashes: list[bytes] = []
        """Hashes of the full blocks of ``token_ids``, extended as blocks fill."""
        self.num_indexed_blocks = 0
        """Leading blocks already offered to the prefix-cache index (``KVCacheManager.commit``)."""
        self.num_preemptions = 0
        self.state: dict[str, Any] = {}
        """Per-sequence state owned by layers above (detokenizer, stop checker)."""

    @property
    def num_output_tokens(self) -> int:
        return self.num_tokens - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def prompt_token_ids(self) -> list[int]:
        return self.token_ids[: self.num_prompt_tokens]

    @property
    def num_uncomputed_tokens(self) -> int:
        return self.num_tokens - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status not in _LIVE  # not via the status's property: every sequence, every step

    def append_token(self, token_id: int) -> None:
        if self.num_pending_tokens:
            raise EngineError(f"sequence {self.seq_id}: a token appended past a pending place")
        self.token_ids.append(token_id)
        self.num_tokens += 1

    def hold_place(self) -> None:
        """Count a token that a step in flight samples, before the host knows it."""
        self.num_pending_tokens += 1
        self.num_tokens += 1

    def fill_place(self, token_id: int) -> None:
        """The first pending token arrived."""
        if not self.num_pending_tokens:
            raise EngineError(f"sequence {self.seq_id}: no pending place to fill")
        self.num_pending_tokens -= 1
        self.token_ids.append(token_id)

    def __repr__(self) -> str:
        # Lengths and ids only: a sequence holds a prompt.
        return (
            f"Sequence(id={self.seq_id}, request={self.request_id!r}, model={self.model!r}, "
            f"status={self.status.value}, prompt_len={self.num_prompt_tokens}, "
            f"output_len={self.num_output_tokens}, pending={self.num_pending_tokens}, "
            f"computed={self.num_computed_tokens}, "
            f"blocks={len(self.block_ids)})"
        )
