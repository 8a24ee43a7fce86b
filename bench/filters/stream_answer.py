"""CPU of the streaming response filter over one whole 64-token answer, the unit the gateway
pays per streamed request: the stream's set-up, its deltas and its ``finish``.

    PYTHONPATH=<tree> python -m bench.filters.stream_answer [--repeat 5] [--number 300]

Two answers of 64 tokens under the packaged policy (every detector on): ``hello``, the stub
engine's token (" hello") 64 times, what ``strongroom bench gateway`` streams; ``prose``, 64
tokens of English prose with punctuation and no value. Each is fed in deltas of 1, 4 and 16
tokens, and as the gateway bench delivers it (the first token, then the other 63 in one delta).
Wall time (``time.perf_counter``) per answer, best of ``--repeat`` runs of ``--number``
answers: on a shared VM run trees alternately and compare medians.
"""

from __future__ import annotations

import re
import tempfile
import time
from pathlib import Path

import click

from filters import FilterConfig, FilterContext, FilterPipeline

CTX = FilterContext(roles=("user",), model="m")
PROSE = (
    "The model explains how attention works, step by step, in plain words. Each token looks at "
    "every earlier token, weighs them by similarity, and mixes their values; the result goes "
    "through a small network. Write to support if you need help with the setup or the limits "
    "of the service. In short: the layers stack, the heads split the work, and the output is a "
    "distribution over the next token, sampled with the temperature you set in the request."
)
TOKENS = {"hello": [" hello"] * 64, "prose": re.findall(r"\s*[^\s,.;:]+|[,.;:]", PROSE)[:64]}


def cuts(tokens: list[str]) -> dict[str, list[str]]:
    by_size = {f"{k} tok": ["".join(tokens[i : i + k]) for i in range(0, len(tokens), k)] for k in (1, 4, 16)}
    return {**by_size, "1 + 63": [tokens[0], "".join(tokens[1:])]}


def answer_us(pipeline: FilterPipeline, deltas: list[str], number: int, repeat: int) -> tuple[float, ...]:
    """Best (set-up, deltas, finish) in microseconds per answer."""
    best = (float("inf"),) * 3
    for _ in range(repeat):
        setup = feed = finish = 0.0
        for _ in range(number):
            t0 = time.perf_counter()
            sf = pipeline.stream(CTX)
            t1 = time.perf_counter()
            for delta in deltas:
                sf.feed(delta)
            t2 = time.perf_counter()
            sf.finish()
            t3 = time.perf_counter()
            setup, feed, finish = setup + t1 - t0, feed + t2 - t1, finish + t3 - t2
        run = (setup * 1e6 / number, feed * 1e6 / number, finish * 1e6 / number)
        best = run if sum(run) < sum(best) else best
    return best


@click.command()
@click.option("--repeat", type=int, default=5, show_default=True)
@click.option("--number", type=int, default=300, show_default=True)
def main(repeat: int, number: int) -> None:
    pipeline = FilterPipeline.from_config(FilterConfig(), Path(tempfile.mkdtemp()))
    click.echo("answer | deltas | set-up us | deltas us | finish us | total us | us/token")
    for name, tokens in TOKENS.items():
        for cut, deltas in cuts(tokens).items():
            setup, feed, finish = answer_us(pipeline, deltas, number, repeat)
            total = setup + feed + finish
            click.echo(
                f"{name} | {cut} | {setup:.1f} | {feed:.1f} | {finish:.1f} | {total:.1f} | {total / 64:.2f}"
            )


if __name__ == "__main__":
    main()
