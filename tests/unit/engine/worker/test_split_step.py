"""Which steps ``ModelRunner`` splits into the decode graph plus prefill replays (the choice only;
the replays themselves run on a GPU: ``test_prefill_graphs``)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from engine.core.scheduler import ScheduledSeq
from engine.worker.model_runner import split_step

SEQ: Any = None  # the choice never reads the sequence
GRAPHS: Any = SimpleNamespace(fits=lambda n: n <= 8)
PREFILL: Any = SimpleNamespace(max_tokens=512)


def _decode() -> ScheduledSeq:
    return ScheduledSeq(SEQ, 40, 1, True)


def _chunk(n: int, *, sampling: bool = True) -> ScheduledSeq:
    return ScheduledSeq(SEQ, 0, n, sampling)


def test_decodes_and_a_few_short_chunks_are_split() -> None:
    items = [_decode(), _decode(), _chunk(300), _chunk(24, sampling=False)]
    assert split_step(items, None, GRAPHS, PREFILL, 2) == ([0, 1], [2, 3])
    # Decode rows reading the previous step's tokens on the device go to the decode graph.
    assert split_step(items, [1, 0, -1, -1], GRAPHS, PREFILL, 2) == ([0, 1], [2, 3])
    # The order of the step is kept, whatever it is.
    assert split_step([_chunk(20), _decode()], None, GRAPHS, PREFILL, 1) == ([1], [0])


def test_every_other_step_is_not() -> None:
    decode, chunk = _decode(), _chunk(100)
    assert split_step([decode, decode], None, GRAPHS, PREFILL, 2) is None  # decodes only: the decode graph
    assert split_step([chunk, chunk], None, GRAPHS, PREFILL, 2) is None  # no decode: nothing to split
    assert split_step([decode, chunk, chunk, chunk], None, GRAPHS, PREFILL, 2) is None  # too many chunks
    assert split_step([decode, chunk], None, GRAPHS, PREFILL, 0) is None  # off
    assert split_step([decode, _chunk(513)], None, GRAPHS, PREFILL, 2) is None  # over the largest bucket
    assert split_step([decode, _chunk(1)], None, GRAPHS, PREFILL, 2) is None  # a one-token chunk
    assert split_step([decode] * 9 + [chunk], None, GRAPHS, PREFILL, 2) is None  # past the decode graphs
    # A chunk whose input is still on the device (never, but then not from the host).
    assert split_step([decode, chunk], [-1, 0], GRAPHS, PREFILL, 2) is None
