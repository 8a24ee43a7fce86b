"""Weight quantization: which scheme a model's linear layers are stored in, and its arithmetic.

    scheme.py    WeightQuant: FP8 E4M3 / INT8 weights, scale granularity, read from a checkpoint's
                 ``quantization_config`` or asked for at load time; anything else is refused
    tensors.py   quantize / dequantize (the CPU reference every kernel is checked against)

The layers that hold quantized weights are ``engine.layers.quantized_linear``.
"""

from engine.quantization.scheme import QUANTIZATIONS, UnsupportedQuantizationError, WeightQuant
from engine.quantization.tensors import dequantize, quantize, quantize_blocks

__all__ = [
    "QUANTIZATIONS",
    "UnsupportedQuantizationError",
    "WeightQuant",
    "dequantize",
    "quantize",
    "quantize_blocks",
]
