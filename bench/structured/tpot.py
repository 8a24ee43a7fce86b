"""Constrained vs free decoding: time per output token at a given batch, same model, same lengths.

Every sequence runs exactly ``max_tokens`` decode steps: free rows ignore EOS; constrained rows
decode under a schema that cannot finish sooner (an array of at least ``max_tokens`` booleans),
so both sides measure the same number of steps and the difference is the mask's cost.
"""

from __future__ import annotations

import time
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from engine import LLM, SamplingParams
from engine.core.structured_output import StructuredOutput

__all__ = ["tpot"]


def _schema(max_tokens: int) -> StructuredOutput:
    return StructuredOutput.json_schema(
        {
            "type": "object",
            "properties": {"flags": {"type": "array", "items": {"type": "boolean"}, "minItems": max_tokens}},
            "required": ["flags"],
            "additionalProperties": False,
        }
    )


def _timed(llm: LLM, batch: int, params: SamplingParams) -> tuple[float, int]:
    start = time.perf_counter()
    outs = llm.generate(["Hello"] * batch, params)
    elapsed = time.perf_counter() - start
    return elapsed, sum(len(o.outputs[0].token_ids) for o in outs)


def tpot(
    device: str, model: str | None, batches: list[int], max_tokens: int, rounds: int = 5
) -> list[dict[str, Any]]:
    """Per batch: ms per decode step, free and constrained (best of ``rounds``), and the overhead."""
    with TemporaryDirectory() as tmp:
        if model is None:
            from engine.loading.demo import write_demo_model

            model = str(write_demo_model("demo-chat", Path(tmp) / "demo-chat"))
        llm = LLM(model, device=device, dtype="float32" if device == "cpu" else "bfloat16")
        free = SamplingParams(temperature=0.8, seed=1, max_tokens=max_tokens, ignore_eos=True)
        constrained = SamplingParams(
            temperature=0.8, seed=1, max_tokens=max_tokens, structured=_schema(max_tokens)
        )
        records = []
        for batch in batches:
            _timed(llm, batch, free), _timed(llm, batch, constrained)  # warm-up
            best: dict[str, float] = {}
            for _ in range(rounds):  # alternating, so load on a shared machine hits both alike
                for name, params in (("free", free), ("constrained", constrained)):
                    elapsed, tokens = _timed(llm, batch, params)
                    step_ms = elapsed / (tokens / batch) * 1e3
                    best[name] = min(best.get(name, float("inf")), step_ms)
            records.append(
                {
                    "batch": batch,
                    "max_tokens": max_tokens,
                    "free_step_ms": best["free"],
                    "constrained_step_ms": best["constrained"],
                    "overhead_pct": (best["constrained"] / best["free"] - 1) * 100,
                }
            )
        return records
