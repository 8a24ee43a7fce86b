"""Per-token mask time and schema coverage of each grammar library (the structured-output choice).

Each timed schema's document is tokenized by longest match and forced through every matcher of a
batch (all rows at the same place): per step, one batched bitmask fill is timed, then each matcher
takes the document's next token (which the mask must allow). Compile time is reported apart; it is
paid once per schema (the engine caches compiled grammars by schema hash).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
from tokenizers import Tokenizer

from bench.structured.candidates import CANDIDATES, Candidate, token_bytes
from bench.structured.schemas import COVERAGE, TIMED, SchemaCase

__all__ = ["coverage", "mask_times"]


def _allowed(bitmask: torch.Tensor, row: int, token_id: int) -> bool:
    return bool((int(bitmask[row, token_id // 32]) >> (token_id % 32)) & 1)


def _next_allowed(data: bytes, vocab: dict[bytes, int], bitmask: torch.Tensor) -> int | None:
    # The longest token the mask allows that spells the document's next bytes.
    for n in range(min(32, len(data)), 0, -1):
        tid = vocab.get(data[:n])
        if tid is not None and _allowed(bitmask, 0, tid):
            return tid
    return None


def _run_document(
    cand: Candidate, compiled: Any, text: str, batch: int, index: dict[bytes, int], vocab_size: int
) -> list[float]:
    """Force ``text`` through ``batch`` matchers, token by token as the masks allow; the time of each
    step's bitmask fill."""
    matchers = [cand.matcher(compiled) for _ in range(batch)]
    bitmask = torch.full((batch, (vocab_size + 31) // 32), -1, dtype=torch.int32)
    token_text = {v: k for k, v in index.items()}
    data, times = text.encode(), []
    while data:
        start = time.perf_counter()
        cand.fill(matchers, bitmask)
        times.append(time.perf_counter() - start)
        tid = _next_allowed(data, index, bitmask)
        if tid is None:
            raise AssertionError(
                f"{cand.name} masks out every token spelling {data[:16]!r} of a valid document"
            )
        for m in matchers:
            if not cand.accept(m, tid):
                raise AssertionError(f"{cand.name} rejects token {tid} of a valid document")
        data = data[len(token_text[tid]) :]
    return times


def _vocab_index(tokenizer: Tokenizer, eos_id: int) -> dict[bytes, int]:
    index: dict[bytes, int] = {}
    for i, b in enumerate(token_bytes(tokenizer)):
        if i != eos_id and b and b not in index:
            index[b] = i
    return index


def mask_times(
    tokenizer: Tokenizer,
    eos_id: int,
    batches: list[int],
    threads: int,
    candidates: list[str],
    rounds: int = 3,
) -> list[dict[str, Any]]:
    """One record per (candidate, schema, batch): compile ms, mask µs per step and per row."""
    index = _vocab_index(tokenizer, eos_id)
    vocab_size = tokenizer.get_vocab_size()
    records = []
    for name in candidates:
        cand = CANDIDATES[name](tokenizer, eos_id, threads)
        for case in TIMED:
            record: dict[str, Any] = {"library": name, "schema": case.name, "doc_bytes": len(case.valid)}
            try:
                start = time.perf_counter()
                compiled = cand.compile(case.schema)
                record["compile_ms"] = (time.perf_counter() - start) * 1e3
                for batch in batches:
                    steps = [
                        t
                        for _ in range(rounds)
                        for t in _run_document(cand, compiled, case.valid, batch, index, vocab_size)
                    ]
                    record[f"b{batch}_step_us_mean"] = statistics.fmean(steps) * 1e6
                    record[f"b{batch}_step_us_p99"] = sorted(steps)[int(0.99 * (len(steps) - 1))] * 1e6
                    record[f"b{batch}_steps"] = len(steps) // rounds
                    record[f"b{batch}_per_row_us"] = statistics.fmean(steps) * 1e6 / batch
            except Exception as exc:  # a library that cannot serve a schema is a result, not a crash
                record["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            records.append(record)
    return records


def _enforces(cand: Candidate, case: SchemaCase, index: dict[bytes, int], vocab_size: int) -> str:
    try:
        compiled = cand.compile(case.schema)
        _run_document(cand, compiled, case.valid, 1, index, vocab_size)
    except Exception as exc:
        return f"fails: {type(exc).__name__}: {str(exc)[:120]}"
    try:
        _run_document(cand, compiled, case.invalid, 1, index, vocab_size)
    except AssertionError:
        return "enforced"
    return "NOT enforced (the breaking document passes)"


def coverage(
    tokenizer: Tokenizer, eos_id: int, threads: int, candidates: list[str]
) -> dict[str, dict[str, str]]:
    """For each library and keyword: whether a document breaking it is rejected."""
    index = _vocab_index(tokenizer, eos_id)
    out: dict[str, dict[str, str]] = {}
    for name in candidates:
        cand = CANDIDATES[name](tokenizer, eos_id, threads)
        out[name] = {case.name: _enforces(cand, case, index, tokenizer.get_vocab_size()) for case in COVERAGE}
    return out


def _timed_ms(step: Any, device: str, iters: int, setup: Any = None) -> float:
    """Mean ms of ``step()`` with the device drained after each call (the mask's whole latency);
    ``setup()`` runs before each, untimed."""
    cuda = device.startswith("cuda")
    for _ in range(3):
        if setup is not None:
            setup()
        step()
    total = 0.0
    for _ in range(iters):
        if setup is not None:
            setup()
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        total += time.perf_counter() - start
    return total / iters * 1e3


def engine_mask_times(
    tokenizer: Tokenizer, eos_id: int, batches: list[int], device: str, iters: int = 20
) -> list[dict[str, Any]]:
    """The engine's own per-step mask cost with every row but one constrained (the last row stays
    free), json_object at its start: the old path (``LegacyGrammarMask``: fresh pageable bitmask,
    bool unpack, masked_fill) beside ``GrammarMask.apply`` (pinned buffer, packed kernel on CUDA),
    and what ``apply`` leaves on the step when a prefetch has already filled the masks."""
    from bench.structured.legacy_mask import LegacyGrammarMask
    from engine.core.structured_output import StructuredOutput
    from engine.sampling import GrammarCompiler
    from engine.sampling.grammar_mask import GrammarMask

    vocab = tokenizer.get_vocab_size()
    compiler = GrammarCompiler(tokenizer.to_str(), vocab, {eos_id})
    old, new = LegacyGrammarMask(), GrammarMask()
    records = []
    for batch in batches:
        matchers = [compiler.matcher(StructuredOutput.json_object()) for _ in range(batch)]
        records.append(_engine_mask_record(old, new, matchers, vocab, device, iters))
    return records


def _engine_mask_record(
    old: Any, new: Any, matchers: list[Any], vocab: int, device: str, iters: int
) -> dict[str, Any]:
    batch = len(matchers)
    logits = torch.randn(batch + 1, vocab, device=device)
    rows = [*matchers, None]
    want = logits.clone()
    old.apply(want, rows)
    got = logits.clone()
    new.apply(got, rows)
    if not torch.equal(got, want):
        raise AssertionError(f"the old and new masks differ at batch {batch}")

    def prefetched() -> None:
        new.prefetch(matchers, logits.device)
        new.wait()

    return {
        "batch": batch,
        "constrained_rows": batch,
        "vocab": vocab,
        "old_apply_ms": _timed_ms(lambda: old.apply(logits, rows), device, iters),
        "new_apply_ms": _timed_ms(lambda: new.apply(logits, rows), device, iters),
        "fill_ms": _timed_ms(prefetched, "cpu", iters),
        "new_apply_after_prefetch_ms": _timed_ms(
            lambda: new.apply(logits, rows), device, iters, setup=prefetched
        ),
    }
