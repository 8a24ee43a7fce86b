"""When a sequence is done, and which of its text may be shown to the client yet.

Stop strings are matched on the detokenized text, so a stop string can span tokens. Text that could
still turn out to be the start of a stop string is held back until the next delta settles it::

    stop = "###"      released | held
    delta "ab#"   ->  "ab"     | "#"
    delta "#x"    ->  "##x" is not a match; "#" + "#x" = "##x" -> released "##x"
    delta "#"+"##"->  match: release up to the stop string (plus it, if include_stop_str_in_output)

Finish reasons follow OpenAI: "stop" for EOS, a stop token id or a stop string; "length" when
max_tokens is reached. EOS is ignored under ``ignore_eos``; explicit stop token ids never are. The
text of a stop token is not part of the output unless ``include_stop_str_in_output`` (as vLLM).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from engine.core.sampling_params import SamplingParams

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True, slots=True)
class StopUpdate:
    text: str
    """Text that may be released to the client now."""
    finish_reason: FinishReason | None = None
    stop_reason: int | str | None = None
    """The stop token id or stop string that matched (vLLM's ``stop_reason``); None for EOS/length."""

    @property
    def is_finished(self) -> bool:
        return self.finish_reason is not None


class StopChecker:
    """Per-sequence; feed it every generated token with the text delta it produced."""

    def __init__(self, params: SamplingParams, *, eos_token_ids: Collection[int] = ()) -> None:
        self._stop = tuple(s for s in params.stop if s)
        self._stop_token_ids = frozenset(params.stop_token_ids)
        self._eos_token_ids = frozenset(() if params.ignore_eos else eos_token_ids)
        self._max_tokens = params.max_tokens
        self._include_stop = params.include_stop_str_in_output
        self._held = ""
        self._num_tokens = 0
        self._is_finished = False

    def __repr__(self) -> str:
        return f"StopChecker(num_tokens={self._num_tokens}, num_held_chars={len(self._held)})"

    @property
    def num_tokens(self) -> int:
        return self._num_tokens

    @property
    def has_stop_strings(self) -> bool:
        return bool(self._stop)

    def drops_text_of(self, token_id: int) -> bool:
        """Whether token_id ends the sequence without its text being part of the output."""
        ends = token_id in self._eos_token_ids or token_id in self._stop_token_ids
        return ends and not self._include_stop

    def release(self) -> str:
        """End the sequence from outside (abort, the pool): the text held back, released as a
        length finish releases it."""
        held = self._held
        self._finish(StopUpdate(text=held))
        return held

    def update(self, token_id: int, delta: str) -> StopUpdate:
        """Account for one generated token and its text delta (possibly empty)."""
        if self._is_finished:
            raise RuntimeError("update() after the sequence finished")
        self._num_tokens += 1
        if token_id in self._eos_token_ids or token_id in self._stop_token_ids:
            text = self._held + (delta if self._include_stop else "")
            reason = token_id if token_id in self._stop_token_ids else None
            return self._finish(StopUpdate(text=text, finish_reason="stop", stop_reason=reason))
        if not self._stop:  # nothing to match or hold back: the common case, once per token
            if self._num_tokens >= self._max_tokens:
                return self._finish(StopUpdate(text=delta, finish_reason="length"))
            return StopUpdate(text=delta)
        pending = self._held + delta
        match = self._find_stop(pending)
        if match is not None:
            start, stop = match
            end = start + len(stop) if self._include_stop else start
            return self._finish(StopUpdate(text=pending[:end], finish_reason="stop", stop_reason=stop))
        if self._num_tokens >= self._max_tokens:
            return self._finish(StopUpdate(text=pending, finish_reason="length"))
        num_held = self._partial_stop_length(pending)
        self._held = pending[len(pending) - num_held :]
        return StopUpdate(text=pending[: len(pending) - num_held])

    def _finish(self, update: StopUpdate) -> StopUpdate:
        self._is_finished = True
        self._held = ""
        return update

    def _find_stop(self, text: str) -> tuple[int, str] | None:
        """The earliest stop string in text (the longest one when two start at the same place)."""
        best: tuple[int, str] | None = None
        for stop in self._stop:
            index = text.find(stop)
            if index >= 0 and (best is None or (index, -len(stop)) < (best[0], -len(best[1]))):
                best = (index, stop)
        return best

    def _partial_stop_length(self, text: str) -> int:
        """Length of the longest suffix of text that is a proper prefix of some stop string."""
        longest = 0
        for stop in self._stop:
            for length in range(min(len(stop) - 1, len(text)), longest, -1):
                if text.endswith(stop[:length]):
                    longest = length
                    break
        return longest
