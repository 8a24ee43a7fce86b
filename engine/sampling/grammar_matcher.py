"""One sequence's place in its grammar: which tokens may come next, advanced by each sampled token.

The matcher lives with the sequence's output state (``SequenceOutput``), so it survives
preemption: a preempted sequence keeps its tokens and is recomputed, and its matcher is already
past them. Only EOS is allowed once the document is complete, and EOS only then.

With asynchronous scheduling a sequence's next step is launched before its last token reaches the
host; the engine advances the matcher by that token as soon as it arrives (to fill the next mask),
and again when it turns the token into a delta. ``advance_to`` counts tokens, so the second call is
a no-op.
"""

from __future__ import annotations

from concurrent.futures import Future

import llguidance

__all__ = ["GrammarMatcher"]


class GrammarMatcher:
    def __init__(self, matcher: llguidance.LLMatcher, vocab_size: int) -> None:
        self.ll = matcher
        """The llguidance matcher (``GrammarMask`` fills bitmasks from it, batched)."""
        self.vocab_size = vocab_size
        self.num_accepted = 0
        """Output tokens consumed so far."""
        self.reading: Future[None] | None = None
        """A mask fill under way on another thread that reads this matcher (``GrammarMask.prefetch``)."""

    def accept(self, token_id: int) -> None:
        """Advance past a sampled token. The mask allowed it, so a refusal is a bug: fail loudly."""
        if self.reading is not None:  # llguidance must not read a matcher while it changes
            reading, self.reading = self.reading, None
            reading.result()
        if not self.ll.consume_token(token_id):
            raise RuntimeError(f"grammar refused token {token_id}: {self.ll.get_error()}")
        self.num_accepted += 1

    def advance_to(self, num_tokens: int, token_id: int) -> None:
        """Make ``token_id``, the ``num_tokens``-th output token, the last one consumed (once)."""
        if num_tokens == self.num_accepted + 1:
            self.accept(token_id)
        elif num_tokens != self.num_accepted:
            raise RuntimeError(f"grammar at token {self.num_accepted} asked to take token {num_tokens}")

    @property
    def is_complete(self) -> bool:
        """The document so far is a whole one (EOS may follow)."""
        return bool(self.ll.is_accepting())

    def __repr__(self) -> str:
        return f"GrammarMatcher(complete={self.is_complete})"
