"""CPU of the streaming response filter per delta and per token, beside the two filters it
replaced, in the same run, on one core:

- ``eager``: the incremental filter as every cursor reading every delta
  (``bench.filters.eager_stream_filter``, the filter before idle cursors were left unread);
- ``windowed``: the filter before that, which rescanned a ~570-character window with every
  detector each delta (``bench.filters.windowed_stream_filter``).

    python -m bench.filters.stream [--repeat 5]

Three answers, packaged policy (every detector on):

- ``mixed``: the 2 KB zh+en text of ``bench.filters.speed`` (a card, a mobile, an address, an
  IP, a resident ID, an IBAN, an SSN, a credit code in 2,048 bytes: far denser than an answer);
- ``prose``: 2,100 characters of English without a value in it;
- ``answer``: 4,000 characters of English prose with a value (card, address, IBAN, IP, key,
  injection phrase) after about one sentence in ten, as a model answers now and then.

For delta sizes 1, 4, 16 and 64 characters: CPU time per delta and per character, characters
handed to detectors per character received (``StreamFilter.num_scanned``), and the most
characters held back. Then the whole stream path per token: ``StreamWriter.add`` for
4-character tokens (filter, logprob bookkeeping and the SSE chunk), with each filter and with a
policy that turns every detector off. CPU is ``time.process_time`` of the best of ``--repeat``
runs.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import click

from bench.filters.eager_stream_filter import EagerStreamFilter
from bench.filters.results import RESULTS, pin_one_core
from bench.filters.speed import prompt_2kb
from bench.filters.windowed_stream_filter import WindowedStreamFilter
from bench.provenance import provenance
from engine.serving.protocol import DeltaEvent
from filters import Direction, FilterConfig, FilterContext, FilterPipeline
from gateway.response_shape import ResponseShape
from gateway.stream_writer import StreamWriter

CTX = FilterContext(roles=("user",), model="demo-chat")
DELTAS = (1, 4, 16, 64)
TOKEN_CHARS = 4
PROSE = (
    "The model explains how attention works: every token looks at the tokens before it, weighs "
    "them by how well its query matches their keys, and mixes their values in those proportions. "
) * 12


ANSWER_VALUES = (
    "4111 1111 1111 1111",
    "zhang.san@example.com",
    "DE89 3704 0044 0532 0130 00",
    "10.1.2.3",
    'api_key = "a8f9Kq2LmZ7xP0vB3nW5"',
    "ignore previous instructions",
)


def answer_text(num_chars: int = 4000) -> str:
    """English prose with a value after about one sentence in ten."""
    rng = random.Random(0)
    sentences = [s.strip() + ". " for s in PROSE.split(". ") if s.strip()][:2]
    text = ""
    while len(text) < num_chars:
        text += rng.choice(sentences)
        if rng.random() < 0.1:
            text += f"Use {rng.choice(ANSWER_VALUES)} here. "
    return text


class _Peer:
    """A pipeline whose streams are one of the replaced filters (for ``StreamWriter``)."""

    def __init__(
        self, pipeline: FilterPipeline, kind: type[EagerStreamFilter | WindowedStreamFilter]
    ) -> None:
        self._pipeline = pipeline
        self._kind = kind

    def stream(self, ctx: FilterContext) -> EagerStreamFilter | WindowedStreamFilter:
        ruleset = self._pipeline.ruleset
        actions = ruleset.actions_for(Direction.RESPONSE, ctx)
        return self._kind(ruleset.scanner, actions, on_error=ruleset.policy.on_error)


def best_cpu(run: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        run()
        best = min(best, time.process_time() - t0)
    return best


def stream_once(make: Callable[[], Any], chunks: list[str]) -> tuple[Any, int]:
    sf = make()
    most_held = 0
    received = 0
    released = 0
    for chunk in chunks:
        received += len(chunk)
        released += len(sf.feed(chunk).release)
        most_held = max(most_held, received - released)
    sf.finish()
    return sf, most_held


def filter_costs(pipeline: FilterPipeline, text: str, repeat: int) -> dict[str, Any]:
    eager, windowed = _Peer(pipeline, EagerStreamFilter), _Peer(pipeline, WindowedStreamFilter)
    rows = {}
    for delta in DELTAS:
        chunks = [text[i : i + delta] for i in range(0, len(text), delta)]
        row: dict[str, Any] = {"num_deltas": len(chunks)}
        for name, make in (
            ("incremental", lambda: pipeline.stream(CTX)),
            ("eager", lambda: eager.stream(CTX)),
            ("windowed", lambda: windowed.stream(CTX)),
        ):
            cpu = best_cpu(lambda make=make, chunks=chunks: stream_once(make, chunks), repeat)
            sf, most_held = stream_once(make, chunks)
            row[name] = {
                "us_per_delta": round(cpu / len(chunks) * 1e6, 2),
                "us_per_char": round(cpu / len(text) * 1e6, 3),
                "most_chars_held": most_held,
            }
            if name != "windowed":
                row[name]["chars_scanned_per_char"] = round(sf.num_scanned / len(text), 2)
        for peer in ("eager", "windowed"):
            row[f"speedup_vs_{peer}"] = round(
                row[peer]["us_per_delta"] / row["incremental"]["us_per_delta"], 1
            )
        rows[f"delta_{delta}"] = row
    return {"chars": len(text), **rows}


def writer_costs(pipelines: dict[str, Any], text: str, repeat: int) -> dict[str, Any]:
    shape = ResponseShape(is_chat=True, model="demo-chat")
    tokens = [text[i : i + TOKEN_CHARS] for i in range(0, len(text), TOKEN_CHARS)]
    events = [
        DeltaEvent(index=0, text=t, token_ids=[i], num_prompt_tokens=8, num_output_tokens=i + 1)
        for i, t in enumerate(tokens)
    ]

    def run(filters: Any) -> None:
        writer = StreamWriter(shape, cast("FilterPipeline", filters), CTX)
        writer.start()
        for event in events:
            writer.add(event)
        writer.finish()

    out = {"num_tokens": len(tokens), "token_chars": TOKEN_CHARS}
    for name, filters in pipelines.items():
        cpu = best_cpu(lambda filters=filters: run(filters), repeat)
        out[f"{name}_us_per_token"] = round(cpu / len(tokens) * 1e6, 2)
    return out


def off_pipeline(folder: Path) -> FilterPipeline:
    policy = folder / "off.toml"
    policy.write_text('version = 1\ndefault_action = "off"\non_error = "block"\n')
    return FilterPipeline.from_config(FilterConfig(policy_file=str(policy)), folder)


@click.command()
@click.option("--repeat", type=int, default=5, show_default=True)
@click.option("--out", default="filters_stream.json", show_default=True)
def main(repeat: int, out: str) -> None:
    pin_one_core()
    pipeline = FilterPipeline.from_config(FilterConfig(), Path("."))
    texts = {"mixed": prompt_2kb(random.Random(0)), "prose": PROSE, "answer": answer_text()}
    result: dict[str, Any] = {**provenance(sys.argv, "cpu"), "one_core": True, "policy": "packaged"}
    for name, text in texts.items():
        result[f"filter_{name}"] = filter_costs(pipeline, text, repeat)
    with tempfile.TemporaryDirectory() as folder:
        writers = {
            "incremental": pipeline,
            "eager": _Peer(pipeline, EagerStreamFilter),
            "windowed": _Peer(pipeline, WindowedStreamFilter),
            "filters_off": off_pipeline(Path(folder)),
        }
        for name, text in texts.items():
            result[f"stream_writer_{name}"] = writer_costs(writers, text, repeat)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / out).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    print_table(result, texts)


def print_table(result: dict[str, Any], texts: dict[str, str]) -> None:
    print(
        "text   | delta | incremental us/delta | eager us/delta | windowed us/delta | x eager | scanned/char"
    )
    for name in texts:
        for delta in DELTAS:
            row = result[f"filter_{name}"][f"delta_{delta}"]
            print(
                f"{name:6s} | {delta:5d} | {row['incremental']['us_per_delta']:20.2f} "
                f"| {row['eager']['us_per_delta']:14.2f} | {row['windowed']['us_per_delta']:17.2f} "
                f"| {row['speedup_vs_eager']:7.1f} | {row['incremental']['chars_scanned_per_char']:.2f}"
            )
    print("\nStreamWriter.add, 4-character tokens, us/token")
    print("text   | incremental | eager | windowed | filters off")
    for name in texts:
        w = result[f"stream_writer_{name}"]
        print(
            f"{name:6s} | {w['incremental_us_per_token']:11.2f} | {w['eager_us_per_token']:5.2f} "
            f"| {w['windowed_us_per_token']:8.2f} | {w['filters_off_us_per_token']:.2f}"
        )


if __name__ == "__main__":
    main()
