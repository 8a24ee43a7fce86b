"""A statistical profiler of a process's CPU time, for where cProfile's per-call cost misleads.

A ``SIGPROF`` interval timer fires per slice of the process's CPU time (user and system, every
thread); Python runs the handler in the main thread, which records the stack it interrupted. The
event loop is the main thread, so samples land where the gateway spends its CPU, system calls
included (a write's kernel time is charged to the Python frame that made it). Time in C called
from Python counts for that Python frame; CPU of other threads lands on whatever the main thread
runs next (the gateway's other threads are nearly idle). No per-call cost, so shares are not
skewed toward small Python functions as cProfile's are.
"""

from __future__ import annotations

import collections
import marshal
import signal
from pathlib import Path
from types import FrameType

__all__ = ["CpuSampler", "load_samples"]

Key = tuple[str, int, str]
"""(file, first line, function) of a code object."""


class CpuSampler:
    def __init__(self, interval_s: float = 0.0005) -> None:
        self._interval_s = interval_s
        self.num_samples = 0
        self.own: collections.Counter[Key] = collections.Counter()
        """Samples whose innermost frame was this function."""
        self.inclusive: collections.Counter[Key] = collections.Counter()
        """Samples with this function anywhere on the stack (once per sample)."""

    def start(self) -> None:
        signal.signal(signal.SIGPROF, self._sample)
        signal.setitimer(signal.ITIMER_PROF, self._interval_s, self._interval_s)

    def stop(self, out: Path) -> None:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        out.write_bytes(
            marshal.dumps({"n": self.num_samples, "own": dict(self.own), "cum": dict(self.inclusive)})
        )

    def _sample(self, signum: int, frame: FrameType | None) -> None:
        self.num_samples += 1
        seen: set[Key] = set()
        is_innermost = True
        while frame is not None:
            code = frame.f_code
            key = (code.co_filename, code.co_firstlineno, code.co_name)
            if is_innermost:
                self.own[key] += 1
                is_innermost = False
            if key not in seen:
                seen.add(key)
                self.inclusive[key] += 1
            frame = frame.f_back


def load_samples(path: Path) -> tuple[int, dict[Key, int], dict[Key, int]]:
    """(number of samples, own counts, inclusive counts) as ``CpuSampler.stop`` wrote them."""
    data = marshal.loads(path.read_bytes())
    return data["n"], data["own"], data["cum"]
