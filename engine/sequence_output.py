"""Turns each sampled token into a client-visible delta: detokenize, check stops, attach logprobs.

One ``SequenceOutput`` per sequence holds its incremental detokenizer, its stop checker, its
random generator (the sampler's per-request seed) and its grammar matcher (structured output), so
a preempted sequence resumes where it was.
"""

from __future__ import annotations

import msgspec
import torch

from engine.core.outputs import StreamDelta, TokenLogprob
from engine.core.sequence import Sequence, SequenceStatus
from engine.sampling import GrammarMatcher, SamplingRow, TokenLogprobs, make_generator
from engine.text.detokenizer import IncrementalDetokenizer
from engine.text.stop_checker import StopChecker
from engine.text.tokenizer import Tokenizer

__all__ = ["SequenceOutput"]


class SequenceOutput:
    """The output side of one sequence."""

    def __init__(
        self,
        seq: Sequence,
        tokenizer: Tokenizer,
        *,
        eos_token_ids: frozenset[int],
        max_model_len: int,
        device: torch.device,
        grammar: GrammarMatcher | None = None,
    ) -> None:
        self.seq = seq
        self._tokenizer = tokenizer
        # The context limit is one more way to run out of tokens: fold it into max_tokens.
        max_tokens = min(seq.params.max_tokens, max_model_len - seq.num_prompt_tokens)
        params = msgspec.structs.replace(seq.params, max_tokens=max(1, max_tokens))
        self.max_tokens = params.max_tokens
        """The output length at which this sequence certainly ends."""
        self._detokenizer = IncrementalDetokenizer(tokenizer.hf, prompt_token_ids=seq.prompt_token_ids)
        self._stop = StopChecker(params, eos_token_ids=eos_token_ids)
        self._final_ids: list[int] | None = (
            [] if params.output_text == "final" and not self._stop.has_stop_strings else None
        )
        """With text read only at the end: the output ids not decoded yet (one decode at the end
        instead of two per token)."""
        self.generator = make_generator(seq.params.seed, seq.index, device)
        self.grammar = grammar
        self._row: SamplingRow | None = None

    def sampling_row(self) -> SamplingRow:
        """What the sampler needs this step. Only penalties read the tokens so far; other rows
        skip copying them (and never see a placeholder), so their row is made once."""
        seq = self.seq
        if seq.params.uses_penalties:
            return SamplingRow(
                params=seq.params,
                prompt_token_ids=seq.prompt_token_ids,
                output_token_ids=seq.output_token_ids,
                generator=self.generator,
                grammar=self.grammar,
            )
        if self._row is None:
            self._row = SamplingRow(
                params=seq.params,
                prompt_token_ids=(),
                output_token_ids=(),
                generator=self.generator,
                grammar=self.grammar,
            )
        return self._row

    def on_token(
        self, token_id: int, logprobs: TokenLogprobs | None
    ) -> tuple[StreamDelta, SequenceStatus | None]:
        """The delta for one new token (already appended to the sequence), and the finish status if any."""
        if self.grammar is not None:
            self.grammar.advance_to(self.seq.num_output_tokens, token_id)
        if self._final_ids is not None:
            return self._on_token_final(token_id, logprobs)
        # A stop token left out of the output is not decoded either, or flushing after it could
        # emit part of it (a token that ends in the middle of a character).
        text = "" if self._stop.drops_text_of(token_id) else self._detokenizer.push(token_id)
        update = self._stop.update(token_id, text)
        status = None
        text = update.text
        if update.finish_reason == "length":
            status = SequenceStatus.FINISHED_LENGTH
            text += self._detokenizer.flush()
        elif update.finish_reason == "stop":
            status = SequenceStatus.FINISHED_STOPPED
            if not isinstance(update.stop_reason, str):
                text += self._detokenizer.flush()
        entries = None if logprobs is None else [self._logprob(logprobs)]
        return self._delta(text, [token_id], status, entries), status

    def _on_token_final(
        self, token_id: int, logprobs: TokenLogprobs | None
    ) -> tuple[StreamDelta, SequenceStatus | None]:
        # No stop strings, so the stop checker needs no text; a stop token's text is left out
        # unless asked for, as on_token leaves it out.
        assert self._final_ids is not None
        update = self._stop.update(token_id, "")
        status = None
        text = ""
        if not self._stop.drops_text_of(token_id):
            self._final_ids.append(token_id)
        if update.finish_reason is not None:
            status = (
                SequenceStatus.FINISHED_LENGTH
                if update.finish_reason == "length"
                else SequenceStatus.FINISHED_STOPPED
            )
            text = self._final_text()
        entries = None if logprobs is None else [self._logprob(logprobs)]
        return self._delta(text, [token_id], status, entries), status

    def _final_text(self) -> str:
        ids, self._final_ids = self._final_ids or [], []
        return self._detokenizer.push_final(ids)

    def final(self, status: SequenceStatus) -> StreamDelta:
        """The closing delta of a sequence ended from outside (abort, or outgrowing the pool):
        whatever was still held back (a partial stop string, an unfinished character as U+FFFD),
        as a length finish releases it, so both text modes end on the same text."""
        if self._final_ids is not None:
            text = self._final_text()
        else:
            text = self._stop.release() + self._detokenizer.flush()
        return self._delta(text, [], status, None)

    def _delta(
        self,
        text: str,
        token_ids: list[int],
        status: SequenceStatus | None,
        logprobs: list[TokenLogprob] | None,
    ) -> StreamDelta:
        return StreamDelta(
            index=self.seq.index,
            text=text,
            token_ids=token_ids,
            finish_reason=None if status is None else status.finish_reason,
            num_prompt_tokens=self.seq.num_prompt_tokens,
            num_output_tokens=self.seq.num_output_tokens,
            logprobs=logprobs,
        )

    def _logprob(self, lp: TokenLogprobs) -> TokenLogprob:
        token_bytes = self._tokenizer.token_bytes
        return TokenLogprob(
            token_id=lp.token_id,
            token=self._token_text(lp.token_id),
            logprob=lp.logprob,
            top=[(self._token_text(t), v) for t, v in lp.top],
            bytes=token_bytes(lp.token_id),
            top_bytes=[token_bytes(t) for t, _ in lp.top],
        )

    def _token_text(self, token_id: int) -> str:
        return self._tokenizer.decode([token_id], skip_special_tokens=False)
