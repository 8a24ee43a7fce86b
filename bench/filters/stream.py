"""CPU of the streaming response filter per delta and per token, with the windowed filter it
replaced (``bench.filters.windowed_stream_filter``) as the peer, in the same run, on one core.

    .venv/bin/python -m bench.filters.stream [--repeat 5]

Two answers, packaged policy (every detector on):

- ``mixed``: the 2 KB zh+en text of ``bench.filters.speed`` (a card, a mobile, an address, an
  IP, a resident ID, an IBAN, an SSN, a credit code in 2,048 bytes: far denser than an answer);
- ``prose``: 2,100 characters of English without a value in it.

For delta sizes 1, 4, 16 and 64 characters: CPU time per delta and per character, characters
handed to detectors per character received (``StreamFilter.num_scanned``; the peer rescans
its ~570-character window with every detector each delta), and the most characters held back.
Then the whole stream path per token: ``StreamWriter.add`` for 4-character tokens (filter,
logprob bookkeeping and the SSE chunk), with the new filter, the peer, and a policy that turns
every detector off. CPU is ``time.process_time`` of the best of ``--repeat`` runs.
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import click

from bench.filters.results import RESULTS, pin_one_core, provenance
from bench.filters.speed import prompt_2kb
from bench.filters.windowed_stream_filter import WindowedStreamFilter
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


class _Peer:
    """A pipeline whose streams are the windowed filter (for ``StreamWriter``)."""

    def __init__(self, pipeline: FilterPipeline) -> None:
        self._pipeline = pipeline

    def stream(self, ctx: FilterContext) -> WindowedStreamFilter:
        ruleset = self._pipeline.ruleset
        actions = ruleset.actions_for(Direction.RESPONSE, ctx)
        return WindowedStreamFilter(ruleset.scanner, actions, on_error=ruleset.policy.on_error)


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
    peer = _Peer(pipeline)
    rows = {}
    for delta in DELTAS:
        chunks = [text[i : i + delta] for i in range(0, len(text), delta)]
        row: dict[str, Any] = {"num_deltas": len(chunks)}
        for name, make in (
            ("incremental", lambda: pipeline.stream(CTX)),
            ("windowed", lambda: peer.stream(CTX)),
        ):
            cpu = best_cpu(lambda make=make, chunks=chunks: stream_once(make, chunks), repeat)
            sf, most_held = stream_once(make, chunks)
            row[name] = {
                "us_per_delta": round(cpu / len(chunks) * 1e6, 2),
                "us_per_char": round(cpu / len(text) * 1e6, 3),
                "most_chars_held": most_held,
            }
            if name == "incremental":
                row[name]["chars_scanned_per_char"] = round(sf.num_scanned / len(text), 2)
        row["speedup"] = round(row["windowed"]["us_per_delta"] / row["incremental"]["us_per_delta"], 1)
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
    mixed = prompt_2kb(random.Random(0))
    result: dict[str, Any] = {**provenance("bench.filters.stream"), "one_core": True, "policy": "packaged"}
    result["filter_mixed"] = filter_costs(pipeline, mixed, repeat)
    result["filter_prose"] = filter_costs(pipeline, PROSE, repeat)
    with tempfile.TemporaryDirectory() as folder:
        writers = {
            "incremental": pipeline,
            "windowed": _Peer(pipeline),
            "filters_off": off_pipeline(Path(folder)),
        }
        result["stream_writer_mixed"] = writer_costs(writers, mixed, repeat)
        result["stream_writer_prose"] = writer_costs(writers, PROSE, repeat)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / out).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps(result, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
