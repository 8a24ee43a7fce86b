"""Write tiny quantized checkpoints in the exact formats that FP8 and llm-compressor releases ship,
plus the unquantized twin whose weights are their dequantized values (the reference)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from engine.quantization.tensors import dequantize, quantize, quantize_blocks

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def is_linear(name: str) -> bool:
    return name.endswith(".weight") and name.rsplit(".", 2)[-2] in LINEARS


def _pack_int32(q: torch.Tensor) -> torch.Tensor:
    unsigned = (q.to(torch.int32) + 128).view(q.shape[0], -1, 4)
    shifts = torch.arange(0, 32, 8, dtype=torch.int32)
    return (unsigned << shifts).sum(-1, dtype=torch.int32)


def _quantized(
    w: torch.Tensor, scheme: str, block: tuple[int, int]
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The checkpoint tensors (suffix -> tensor) of one weight, and its dequantized value."""
    if scheme == "hf-fp8-block":
        q, s = quantize_blocks(w, "fp8", block)
        expanded = s.repeat_interleave(block[0], 0)[: w.shape[0]]
        return {"weight": q, "weight_scale_inv": s}, dequantize(q, expanded, block[1])
    if scheme in ("hf-fp8-tensor", "ct-fp8-tensor"):
        s = w.abs().amax().float() / 448
        q = (w.float() / s).to(torch.float8_e4m3fn)
        extra = {"input_scale": torch.tensor(1.0)} if scheme == "ct-fp8-tensor" else {}
        return {
            "weight": q,
            "weight_scale": s.reshape(() if scheme == "hf-fp8-tensor" else (1,)),
            **extra,
        }, q.float() * s
    fmt = "fp8" if scheme.startswith("ct-fp8") else "int8"
    if scheme == "ct-fp8-block":
        q, s = quantize_blocks(w, "fp8", block)
        return {"weight": q, "weight_scale": s}, dequantize(
            q, s.repeat_interleave(block[0], 0)[: w.shape[0]], block[1]
        )
    q, s = quantize(w, fmt)  # per channel: scale [out, 1]
    tensors = {"weight": q, "weight_scale": s.to(torch.bfloat16).float()}
    s = tensors["weight_scale"]
    if scheme == "ct-int8-packed":
        tensors = {
            "weight_packed": _pack_int32(q),
            "weight_scale": s,
            "weight_shape": torch.tensor(list(q.shape)),
        }
    if scheme == "ct-int8-channel":
        tensors["weight_zero_point"] = torch.zeros(q.shape[0], 1, dtype=torch.int8)
    return tensors, dequantize(q, s)


def quant_config(scheme: str, block: tuple[int, int]) -> dict[str, Any]:
    if scheme.startswith("hf-fp8"):
        config: dict[str, Any] = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3"}
        if scheme == "hf-fp8-block":
            config["weight_block_size"] = list(block)
        return config
    kind = "float" if "fp8" in scheme else "int"
    strategy = scheme.split("-")[2].replace("packed", "channel")
    weights: dict[str, Any] = {
        "num_bits": 8,
        "type": kind,
        "strategy": strategy,
        "symmetric": True,
        "dynamic": False,
    }
    if strategy == "block":
        weights["block_structure"] = list(block)
    form = {"fp8": "float-quantized", "int8": "int-quantized"}["fp8" if kind == "float" else "int8"]
    return {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized" if scheme == "ct-int8-packed" else form,
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": None}},
        "ignore": ["lm_head"],
        "quantization_status": "compressed",
    }


def write_quantized(src: Path, dst: Path, scheme: str, block: tuple[int, int] = (128, 128)) -> Path:
    """``dst``: ``src`` quantized by ``scheme``; ``dst``-reference: its dequantized float twin."""
    reference = dst.with_name(dst.name + "-reference")
    shutil.copytree(src, dst)
    shutil.copytree(src, reference)
    tensors = load_file(src / "model.safetensors")
    quantized: dict[str, torch.Tensor] = {}
    dequantized: dict[str, torch.Tensor] = {}
    for name, w in tensors.items():
        if not is_linear(name):
            quantized[name] = dequantized[name] = w
            continue
        stem = name.removesuffix("weight")
        parts, value = _quantized(w, scheme, block)
        quantized.update({stem + k: v.contiguous() for k, v in parts.items()})
        dequantized[name] = value.to(w.dtype)
    save_file(quantized, dst / "model.safetensors")
    save_file(dequantized, reference / "model.safetensors")
    set_quant_config(dst, quant_config(scheme, block))
    return dst


def set_quant_config(path: Path, quantization_config: dict[str, Any] | None) -> None:
    config = json.loads((path / "config.json").read_text())
    config["quantization_config"] = quantization_config
    (path / "config.json").write_text(json.dumps(config))
