"""Held-out perplexity of a tiny Llama trained on the demo corpus, unquantized and quantized.

Trains a small Llama-shaped model (HF transformers, CPU, seeded) on 70 % of the lines of
``engine/loading/demo_data/corpus.txt`` (stopping where the next 10 % score best), saves it as a checkpoint, loads it through the engine
(``LLM``) plain and with ``quantization = "fp8" | "int8"``, and scores the last 20 % with each
set of weights: the engine's quantized layers' dequantized weights (exactly what their CPU
forward multiplies by) are put back into the HF model, which computes the perplexity; "fp8-w8a8"
adds FP8 activations (one scale per row) to the FP8 weights, as the CUDA prefill's
``torch._scaled_mm`` runs them.

The FP8 KV cache is scored by the engine itself: each held-out window is one prefill through the
hosted model's own forward over the engine's paged pool (``kv_cache_dtype = "fp8"``: keys and
values stored as E4M3 and every key read back from it), its logits at every position giving the
perplexity. "engine-fp32" is that scorer with the plain cache (it agrees with "fp32" to float
rounding); "fp8-kv" and "fp8+fp8-kv" (FP8 weights too) are compared with it.

    python -m bench.engine.quant_quality --steps 300 --out bench/results/quant_quality.json
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import Any

import click
import torch

from engine.quantization.tensors import FP8_MAX

__all__ = ["measure"]

_SHAPE = {
    "hidden_size": 64,
    "intermediate_size": 192,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
}
_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_VOCAB = 300
"""Byte-level BPE with few merges: the corpus is 22 lines, so a larger vocabulary only memorizes."""


def _corpus_ids(tokenizer: Any) -> tuple[list[int], list[int], list[int]]:
    """Train (70 % of the lines), validation (10 %: picks the step to stop at), held-out test (20 %)."""
    lines = resources.files("engine.loading").joinpath("demo_data/corpus.txt").read_text("utf-8").splitlines()
    lines = [line for line in lines if line.strip()]
    a, b = round(len(lines) * 0.7), round(len(lines) * 0.8)
    encode = lambda part: tokenizer.encode("\n".join(part)).ids  # noqa: E731
    return encode(lines[:a]), encode(lines[a:b]), encode(lines[b:])


def _train(steps: int, seed: int, window: int) -> tuple[Any, Any, list[int]]:
    # Another benchmark in the same process may have turned autograd off globally.
    with torch.enable_grad():
        return _train_with_grad(steps, seed, window)


def _train_with_grad(steps: int, seed: int, window: int) -> tuple[Any, Any, list[int]]:
    from transformers import LlamaConfig, LlamaForCausalLM

    from engine.loading.demo import _train_tokenizer

    tokenizer = _train_tokenizer(_VOCAB)
    train, validation, held_out = _corpus_ids(tokenizer)
    torch.manual_seed(seed)
    config = LlamaConfig(**_SHAPE, vocab_size=tokenizer.get_vocab_size(), tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    data = torch.tensor(train)
    gen = torch.Generator().manual_seed(seed)
    best = (math.inf, {k: v.clone() for k, v in model.state_dict().items()})
    for step in range(steps):
        starts = torch.randint(0, len(data) - window - 1, (8,), generator=gen)
        batch = torch.stack([data[s : s + window + 1] for s in starts])
        loss = model(input_ids=batch[:, :-1], labels=batch[:, :-1].clone()).loss
        # HF shifts the labels itself: label t scores the token after t.
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10 == 9:  # keep the weights that generalize best: 22 lines are soon memorized
            model.eval()
            score = _perplexity(model, validation, window)
            model.train()
            if score < best[0]:
                best = (score, {k: v.clone() for k, v in model.state_dict().items()})
    model.load_state_dict(best[1])
    return model.eval(), tokenizer, held_out


def _perplexity(model: Any, ids: list[int], window: int) -> float:
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(ids) - 1, window):
            chunk = torch.tensor(ids[start : start + window + 1])[None]
            if chunk.shape[1] < 2:
                break
            logits = model(input_ids=chunk[:, :-1]).logits.float()
            nll = torch.nn.functional.cross_entropy(logits[0], chunk[0, 1:], reduction="sum")
            total, count = total + float(nll), count + chunk.shape[1] - 1
    return math.exp(total / count)


def _engine_weights(path: Path, quantization: str | None) -> dict[str, torch.Tensor]:
    """name -> the weight each HF linear computes with in the engine (dequantized if quantized)."""
    from engine.layers.quantized_linear import QuantizedLinear
    from engine.llm import LLM

    llm = LLM(str(path), quantization=quantization, kv_cache_bytes=1 << 20)
    model = llm.engine.models[path.name].model
    out: dict[str, torch.Tensor] = {}
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if weight is None or not name.endswith(("qkv_proj", "o_proj", "gate_up_proj", "down_proj")):
            continue
        w = module.dequantized(torch.float32) if isinstance(module, QuantizedLinear) else weight.float()
        if name.endswith("qkv_proj"):
            q = module.num_heads * module.head_dim
            kv = module.num_kv_heads * module.head_dim
            parts = dict(zip(("q_proj", "k_proj", "v_proj"), w.split([q, kv, kv]), strict=True))
        elif name.endswith("gate_up_proj"):
            parts = dict(zip(("gate_proj", "up_proj"), w.chunk(2), strict=True))
        else:
            parts = {name.rsplit(".", 1)[1]: w}
        stem = name.rsplit(".", 1)[0]
        out.update({f"{stem}.{part}.weight": t for part, t in parts.items()})
    return out


def _engine_perplexity(path: Path, ids: list[int], window: int, quantization: str | None, kv: str) -> float:
    """Held-out perplexity computed by the engine's hosted model over its own KV pool."""
    from engine.attention_backends.metadata import AttentionMetadata
    from engine.llm import LLM

    llm = LLM(str(path), quantization=quantization, kv_cache_dtype=kv, kv_cache_bytes=1 << 20)
    model, block = llm.engine.models[path.name].model, llm.engine.config.block_size
    total, count = 0.0, 0
    with torch.inference_mode():
        for start in range(0, len(ids) - 1, window):
            chunk = torch.tensor(ids[start : start + window + 1])
            n = chunk.shape[0] - 1
            if n < 1:
                break
            # One sequence in the pool's first blocks (the engine is idle: nothing else holds them).
            meta = AttentionMetadata(
                slot_mapping=torch.arange(n),
                block_tables=torch.arange(-(-n // block), dtype=torch.int32)[None],
                context_lens=torch.tensor([n], dtype=torch.int32),
                query_starts=torch.tensor([0, n], dtype=torch.int32),
                block_size=block,
                host_query_starts=(0, n),
                host_context_lens=(n,),
            )
            hidden = model(chunk[:-1], torch.arange(n), meta)
            logits = model.compute_logits(hidden)  # type: ignore[operator]
            total += float(torch.nn.functional.cross_entropy(logits, chunk[1:], reduction="sum"))
            count += n
    return math.exp(total / count)


def _fp8_round(t: torch.Tensor, *, rows: bool) -> torch.Tensor:
    """t through E4M3 and back, one scale per tensor or per row (last dim)."""
    amax = t.abs().amax(dim=-1, keepdim=True) if rows else t.abs().amax()
    scale = amax.clamp(min=1e-12) / FP8_MAX
    return (t / scale).to(torch.float8_e4m3fn).float() * scale


def measure(steps: int = 300, seed: int = 0, window: int = 64) -> dict[str, Any]:
    """Train, then held-out perplexity per variant and its ratio to unquantized."""
    started = time.perf_counter()
    model, tokenizer, held_out = _train(steps, seed, window)
    trained_s = time.perf_counter() - started
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "quality"
        model.save_pretrained(path)
        tokenizer.save(str(path / "tokenizer.json"))
        (path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))
        weights = {q: _engine_weights(path, q) for q in (None, "fp8", "int8")}
        engine = {
            "engine-fp32": _engine_perplexity(path, held_out, window, None, "auto"),
            "fp8-kv": _engine_perplexity(path, held_out, window, None, "fp8"),
            "fp8+fp8-kv": _engine_perplexity(path, held_out, window, "fp8", "fp8"),
        }

    def score(quantization: str | None, hook: str | None = None) -> float:
        model.load_state_dict(state)
        model.load_state_dict(weights[quantization], strict=False)
        handles = []
        for name, module in model.named_modules():
            if hook == "activations" and name.endswith(_LINEARS):  # each linear's input, per row
                handles.append(
                    module.register_forward_pre_hook(lambda _m, args: (_fp8_round(args[0], rows=True),))
                )
        try:
            return _perplexity(model, held_out, window)
        finally:
            for handle in handles:
                handle.remove()

    results = {
        "fp32": score(None),
        "fp8": score("fp8"),
        "int8": score("int8"),
        # FP8 weights and activations, as the CUDA prefill runs them (quantization.scaled_mm).
        "fp8-w8a8": score("fp8", "activations"),
    }
    # Each variant against the unquantized score of its own scorer (HF model, or the engine).
    ratios = {k: v / results["fp32"] for k, v in results.items()}
    ratios.update({k: v / engine["engine-fp32"] for k, v in engine.items()})
    return {
        "steps": steps,
        "seed": seed,
        "train_seconds": round(trained_s, 1),
        "held_out_tokens": len(held_out),
        "perplexity": {k: round(v, 4) for k, v in (results | engine).items()},
        "ratio_to_fp32": {k: round(v, 4) for k, v in ratios.items()},
    }


@click.command()
@click.option("--steps", type=int, default=300, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=None)
def main(steps: int, seed: int, out: Path | None) -> None:
    torch.set_num_threads(1)
    report = measure(steps, seed)
    text = json.dumps(report, indent=2)
    click.echo(text)
    if out is not None:
        out.write_text(text + "\n")


if __name__ == "__main__":
    main()
