"""Quantized layers split across two tensor-parallel ranks (gloo on CPU) compute, rank by rank,
what the plain parallel layers compute from the dequantized checkpoint weights: weights, block
scales and per-channel scales are sliced alike. Unquantized tensors quantized one by one as they
load give each rank the bits of quantizing its whole loaded shard."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from engine.layers import MergedColumnParallelLinear, QKVParallelLinear, RowParallelLinear
from engine.layers.quantized_linear import quantize_linears
from engine.quantization.scheme import WeightQuant
from engine.quantization.tensors import dequantize, quantize, quantize_blocks
from tests.ports import free_port

WORLD = 2
QUANTS = {
    "fp8-block": WeightQuant("fp8", (32, 32), method="fp8"),
    "int8-channel": WeightQuant("int8", method="compressed-tensors"),
}


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = QKVParallelLinear(64, 16, num_heads=4, num_kv_heads=2)
        self.gate_up = MergedColumnParallelLinear(64, [64, 64])
        self.down = RowParallelLinear(128, 64)


def _checkpoint(quant: WeightQuant) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """name -> (stored weight, checkpoint scale, dequantized weight), the same on every rank."""
    gen = torch.Generator().manual_seed(0)
    shapes = {
        "q": (64, 64),
        "k": (32, 64),
        "v": (32, 64),
        "gate": (64, 64),
        "up": (64, 64),
        "down": (64, 128),
    }
    out = {}
    for name, shape in shapes.items():
        w = torch.randn(*shape, generator=gen) / 8
        if quant.block is None:
            q, s = quantize(w, quant.fmt)
            out[name] = (q, s.flatten(), dequantize(q, s))
        else:
            q, s = quantize_blocks(w, quant.fmt, quant.block)
            rows = s.repeat_interleave(quant.block[0], 0)[: shape[0]]
            out[name] = (q, s, dequantize(q, rows, quant.block[1]))
    return out


def _load(block: _Block, tensors: dict[str, torch.Tensor], scales: dict[str, torch.Tensor] | None) -> None:
    targets = {"q": ("qkv", "q"), "k": ("qkv", "k"), "v": ("qkv", "v"), "gate": ("gate_up", 0),
               "up": ("gate_up", 1), "down": ("down", None)}  # fmt: skip
    for name, (attr, shard) in targets.items():
        layer = getattr(block, attr)
        params = [(layer.weight, tensors[name])]
        if scales is not None:
            params.append((layer.weight_scale, scales[name]))
        for param, loaded in params:
            if shard is None:
                layer.weight_loader(param, loaded)
            else:
                layer.weight_loader(param, loaded, shard)


def _rank(rank: int, port: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        for case, quant in QUANTS.items():
            _check(quant)
            Path(out, f"{case}-{rank}.ok").write_text("ok")
        _check_quantized_as_loaded()
        Path(out, f"as-loaded-{rank}.ok").write_text("ok")
    finally:
        dist.destroy_process_group()


def _check(quant: WeightQuant) -> None:
    ckpt = _checkpoint(quant)
    quantized, plain = _Block(), _Block()
    quantize_linears(quantized, quant, from_weights=False)
    _load(quantized, {k: v[0] for k, v in ckpt.items()}, {k: v[1] for k, v in ckpt.items()})
    _load(plain, {k: v[2] for k, v in ckpt.items()}, None)
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(1))
    h = torch.randn(3, 64, generator=torch.Generator().manual_seed(2))  # this rank's down input
    with torch.no_grad():
        for got, want in [
            (quantized.qkv(x), plain.qkv(x)),
            (quantized.gate_up(x), plain.gate_up(x)),
            (quantized.down(h), plain.down(h)),
        ]:
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def _check_quantized_as_loaded() -> None:
    quant = WeightQuant("fp8")  # quantized at load, per output channel
    weights = {k: v[2] for k, v in _checkpoint(quant).items()}
    as_loaded, after = _Block(), _Block()
    quantize_linears(as_loaded, quant, from_weights=False)
    _load(as_loaded, weights, None)
    _load(after, weights, None)
    quantize_linears(after, quant, from_weights=True)
    for attr in ("qkv", "gate_up", "down"):
        got, want = getattr(as_loaded, attr), getattr(after, attr)
        assert torch.equal(got.weight.view(torch.uint8), want.weight.view(torch.uint8)), attr
        assert torch.equal(got.weight_scale, want.weight_scale), attr


def test_each_rank_matches_the_plain_layers_on_dequantized_weights(tmp_path: Path) -> None:
    mp.spawn(_rank, args=(free_port(), str(tmp_path)), nprocs=WORLD, join=True)
    assert sorted(p.name for p in tmp_path.glob("*.ok")) == sorted(
        f"{c}-{r}.ok" for c in [*QUANTS, "as-loaded"] for r in range(WORLD)
    )
