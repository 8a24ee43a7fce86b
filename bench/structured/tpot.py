"""Constrained vs free decoding: time per output token at a given batch, same model, same lengths.

Every sequence runs exactly ``max_tokens`` decode steps: free rows ignore EOS; constrained rows
decode under a schema that cannot finish sooner (an array of at least ``max_tokens`` booleans),
so both sides measure the same number of steps and the difference is the mask's cost. The
constrained side runs twice, with the engine's ``GrammarMask`` and with the old path
(``LegacyGrammarMask``), alternating in one run.

With no model directory: the demo model on CPU; on CUDA a random Qwen3-0.6B-shaped checkpoint
(bf16) whose tokenizer is the 151,643-token real-like one (``bench.structured.vocab``), so the
grammar sees a real vocabulary's size and the LM head a real model's.
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


def _random_qwen3(path: Path, device: str, shape: str = "qwen3-0.6b") -> Path:
    import json

    from bench.engine.random_model import build_random_qwen3
    from bench.structured.vocab import real_like_tokenizer

    build_random_qwen3(path, shape=shape, dtype="bfloat16" if device != "cpu" else "float32", device=device)
    tok = real_like_tokenizer()
    eos = tok.token_to_id("<|endoftext|>")
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>", "bos_token": None}))
    config = json.loads((path / "config.json").read_text())
    config.update(eos_token_id=eos, bos_token_id=eos, pad_token_id=eos)
    (path / "config.json").write_text(json.dumps(config, indent=1))
    for extra in ("generation_config.json",):
        if (path / extra).exists():
            (path / extra).write_text(json.dumps({"eos_token_id": eos, "bos_token_id": eos}))
    return path


def _timed(llm: LLM, batch: int, params: SamplingParams) -> tuple[float, int]:
    start = time.perf_counter()
    outs = llm.generate(["Hello"] * batch, params)
    elapsed = time.perf_counter() - start
    return elapsed, sum(len(o.outputs[0].token_ids) for o in outs)


def tpot(
    device: str, model: str | None, batches: list[int], max_tokens: int, rounds: int = 5
) -> list[dict[str, Any]]:
    """Per batch: ms per decode step, free and constrained with the new and the old mask (best of
    ``rounds``), and the overheads."""
    from bench.structured.legacy_mask import LegacyGrammarMask
    from engine.sampling.grammar_mask import GrammarMask

    with TemporaryDirectory() as tmp:
        if model is None and device.startswith("cuda"):
            model = str(_random_qwen3(Path(tmp) / "qwen3-0.6b-random", device))
        elif model is None:
            from engine.loading.demo import write_demo_model

            model = str(write_demo_model("demo-chat", Path(tmp) / "demo-chat"))
        llm = LLM(model, device=device, dtype="float32" if device == "cpu" else "bfloat16")
        sampler = llm.engine.sampler
        masks = {"new": GrammarMask(), "old": LegacyGrammarMask()}
        free = SamplingParams(temperature=0.8, seed=1, max_tokens=max_tokens, ignore_eos=True)
        constrained = SamplingParams(
            temperature=0.8, seed=1, max_tokens=max_tokens, structured=_schema(max_tokens)
        )
        sides = (
            ("free", free, "new"),
            ("constrained", constrained, "new"),
            ("constrained_old", constrained, "old"),
        )
        records = []
        for batch in batches:
            for _, params, mask in sides:  # warm-up
                sampler.grammar_mask = masks[mask]  # type: ignore[assignment]
                _timed(llm, batch, params)
            best: dict[str, float] = {}
            for _ in range(rounds):  # alternating, so load on a shared machine hits all alike
                for name, params, mask in sides:
                    sampler.grammar_mask = masks[mask]  # type: ignore[assignment]
                    elapsed, tokens = _timed(llm, batch, params)
                    step_ms = elapsed / (tokens / batch) * 1e3
                    best[name] = min(best.get(name, float("inf")), step_ms)
            records.append(
                {
                    "batch": batch,
                    "max_tokens": max_tokens,
                    "model": Path(model).name,
                    "free_step_ms": best["free"],
                    "constrained_step_ms": best["constrained"],
                    "constrained_old_step_ms": best["constrained_old"],
                    "overhead_pct": (best["constrained"] / best["free"] - 1) * 100,
                    "overhead_old_pct": (best["constrained_old"] / best["free"] - 1) * 100,
                }
            )
        return records
