"""Which quantization a model's linear layers use: read from the checkpoint, or asked for.

Supported, weights only (activations stay in the model dtype, "W8A16"):

    checkpoint ``quantization_config``               weights        scales
    quant_method "fp8" + weight_block_size [bn, bk]   float8_e4m3fn  ``weight_scale_inv`` [out/bn, in/bk]
    quant_method "fp8" without a block size           float8_e4m3fn  ``weight_scale`` (one per tensor)
    "compressed-tensors", float 8-bit, tensor/channel/block        ``weight_scale``
    "compressed-tensors", int 8-bit symmetric, tensor/channel      ``weight_scale`` (``weight`` int8,
                                                                    or ``weight_packed`` 4 per int32)
    requested at load: "fp8" | "int8"                 per output channel, from the loaded weights

Every other scheme (AWQ, GPTQ, 4-bit, group-wise, asymmetric, ...) is refused by name rather
than loaded wrong. Activation scales (``input_scale``) are read past: activations are not
quantized here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from engine.errors import UnsupportedQuantizationError

__all__ = ["QUANTIZATIONS", "UnsupportedQuantizationError", "WeightQuant"]

QUANTIZATIONS = ("fp8", "int8")
"""What ``quantization`` may ask for at load time (per output channel scales)."""

_SUPPORTED = 'supported: "fp8" and "compressed-tensors" 8-bit FP8 / INT8 weights'
_SKIPPED = (".input_scale", ".weight_shape", ".k_scale", ".v_scale", ".kv_scale")
_PACKED_FORMATS = ("pack-quantized",)
_UNPACKED_FORMATS = ("float-quantized", "int-quantized", "naive-quantized")


@dataclass(frozen=True, slots=True)
class WeightQuant:
    fmt: str
    """"fp8" (E4M3) or "int8"."""
    block: tuple[int, int] | None = None
    """Block scales [out-rows, in-columns] per scale; None: one scale per output channel (a
    per-tensor scale is stored as that)."""
    method: str = "load"
    """Where the weights come from: "fp8" / "compressed-tensors" (quantized in the checkpoint) or
    "load" (quantized from unquantized weights as they load)."""
    packed: bool = False
    """compressed-tensors pack-quantized: int8 weights packed four to an int32 ``weight_packed``."""

    @property
    def prequantized(self) -> bool:
        return self.method != "load"

    @property
    def name(self) -> str:
        """Short label for APIs and the audit manifest: "fp8", "int8", "fp8-block128x128"."""
        return self.fmt if self.block is None else f"{self.fmt}-block{self.block[0]}x{self.block[1]}"

    @classmethod
    def requested(cls, quantization: str) -> WeightQuant:
        if quantization not in QUANTIZATIONS:
            raise UnsupportedQuantizationError(
                f"quantization {quantization!r} is not supported (choose one of {QUANTIZATIONS})"
            )
        return cls(quantization)

    @classmethod
    def from_hf(cls, raw: dict[str, Any], source: str) -> WeightQuant | None:
        """The scheme of a checkpoint's config.json, None when it is not quantized."""
        qc = raw.get("quantization_config")
        if not qc:
            return None
        if not isinstance(qc, dict):
            raise UnsupportedQuantizationError(f"{source}: quantization_config must be an object")
        method = qc.get("quant_method")
        if method == "fp8":
            return _from_fp8(qc, source)
        if method == "compressed-tensors":
            return _from_compressed_tensors(qc, source)
        raise UnsupportedQuantizationError(
            f"{source}: quantization method {method!r} is not supported ({_SUPPORTED})"
        )

    def parameter_for(self, name: str, tensor: torch.Tensor, source: str) -> str | None:
        """The model parameter a checkpoint tensor of this scheme loads into (its own name for
        most), or None for tensors that are read past."""
        if not self.prequantized:
            return name
        if name.endswith(_SKIPPED):
            return None
        if name.endswith(".weight_zero_point"):
            if bool(torch.any(tensor != 0)):
                raise UnsupportedQuantizationError(
                    f"{source}: {name} is not zero; asymmetric quantization is not supported"
                )
            return None
        if name.endswith(".weight_scale_inv"):
            return name.removesuffix("_inv")
        if name.endswith(".weight_packed"):
            return name.removesuffix("_packed")
        return name


def _from_fp8(qc: dict[str, Any], source: str) -> WeightQuant:
    fmt = qc.get("fmt", "e4m3")
    if fmt != "e4m3":
        raise UnsupportedQuantizationError(f"{source}: fp8 format {fmt!r} is not supported (only e4m3)")
    _check_ignored(qc.get("modules_to_not_convert") or qc.get("ignored_layers") or [], source)
    block = qc.get("weight_block_size")
    return WeightQuant("fp8", _block(block, source) if block is not None else None, method="fp8")


def _from_compressed_tensors(qc: dict[str, Any], source: str) -> WeightQuant:
    groups = qc.get("config_groups") or {}
    if not isinstance(groups, dict) or not groups:
        raise UnsupportedQuantizationError(f"{source}: compressed-tensors config has no config_groups")
    schemes = {_weight_args(g.get("weights"), source) for g in groups.values()}
    if len(schemes) != 1:
        raise UnsupportedQuantizationError(
            f"{source}: compressed-tensors with several weight schemes ({len(schemes)}) is not supported"
        )
    for group in groups.values():
        targets = group.get("targets") or []
        if targets != ["Linear"]:
            raise UnsupportedQuantizationError(
                f"{source}: compressed-tensors targets {targets} are not supported (only ['Linear'])"
            )
    _check_ignored(qc.get("ignore") or [], source)
    fmt, block = schemes.pop()
    form = qc.get("format", "float-quantized" if fmt == "fp8" else "int-quantized")
    if form not in _PACKED_FORMATS + _UNPACKED_FORMATS or (form in _PACKED_FORMATS and fmt != "int8"):
        raise UnsupportedQuantizationError(
            f"{source}: compressed-tensors format {form!r} is not supported for {fmt}"
        )
    return WeightQuant(fmt, block, method="compressed-tensors", packed=form in _PACKED_FORMATS)


def _weight_args(weights: Any, source: str) -> tuple[str, tuple[int, int] | None]:
    if not isinstance(weights, dict):
        raise UnsupportedQuantizationError(f"{source}: compressed-tensors group without weights")
    bits, kind, strategy = weights.get("num_bits"), weights.get("type", "int"), weights.get("strategy")
    name = f"{kind}{bits} {strategy}"
    if bits != 8 or kind not in ("float", "int"):
        raise UnsupportedQuantizationError(
            f"{source}: compressed-tensors {kind} {bits}-bit weights are not supported ({_SUPPORTED})"
        )
    if not weights.get("symmetric", True):
        raise UnsupportedQuantizationError(f"{source}: asymmetric {name} weights are not supported")
    if weights.get("dynamic", False):
        raise UnsupportedQuantizationError(f"{source}: dynamic {name} weights are not supported")
    fmt = "fp8" if kind == "float" else "int8"
    if strategy in ("tensor", "channel"):
        return fmt, None
    if strategy == "block" and fmt == "fp8":
        return fmt, _block(weights.get("block_structure"), source)
    raise UnsupportedQuantizationError(
        f"{source}: compressed-tensors {name} weights (strategy {strategy!r}) are not supported"
    )


def _block(value: Any, source: str) -> tuple[int, int]:
    if not (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(isinstance(v, int) and v > 0 for v in value)
    ):
        raise UnsupportedQuantizationError(f"{source}: bad weight block size {value!r}")
    return int(value[0]), int(value[1])


def _check_ignored(ignored: list[Any], source: str) -> None:
    # The engine's quantized layers are the decoder's linear layers; the LM head never is, so a
    # checkpoint may leave it out. Any other unquantized module would be loaded wrong.
    others = [m for m in ignored if "lm_head" not in str(m)]
    if others:
        raise UnsupportedQuantizationError(
            f"{source}: checkpoints with unquantized layers other than lm_head are not supported ({others[0]!r})"
        )
