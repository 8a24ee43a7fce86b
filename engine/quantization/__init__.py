"""Quantization: which scheme a model's linear layers are stored in, its arithmetic, and the FP8
KV cache.

    scheme.py    WeightQuant: FP8 E4M3 / INT8 weights, scale granularity, read from a checkpoint's
                 ``quantization_config`` or asked for at load time; anything else is refused
    tensors.py   quantize / dequantize (the CPU reference every kernel is checked against)
    kv_quant.py  kv_cache_dtype "auto" | "fp8": K/V stored as E4M3 with per-layer scales, and the
                 reference rounding the KV kernels store the same bits as

The layers that hold quantized weights are ``engine.layers.quantized_linear``.
"""

from engine.quantization.kv_quant import KV_CACHE_DTYPES, KVScales, dequantize_kv, quantize_kv
from engine.quantization.scheme import QUANTIZATIONS, UnsupportedQuantizationError, WeightQuant
from engine.quantization.tensors import dequantize, quantize, quantize_blocks

__all__ = [
    "KV_CACHE_DTYPES",
    "QUANTIZATIONS",
    "KVScales",
    "UnsupportedQuantizationError",
    "WeightQuant",
    "dequantize",
    "dequantize_kv",
    "quantize",
    "quantize_blocks",
    "quantize_kv",
]
