"""Build a model from its config and copy a checkpoint's tensors into it, shard by shard.

Every parameter is loaded by the layer that owns it (``weight_loader``), which is where a
tensor-parallel rank takes its slice; packed layers (qkv, gate_up) are told which part a
checkpoint tensor is. With a ``WeightQuant`` the model is built on the meta device, its linear
layers swapped for quantized twins, and only then given memory: a quantized checkpoint's tensors
(and scales) load into the twins as they are, an unquantized one's are quantized one tensor at a
time as they arrive. So loading with ``quantization = "fp8"`` never holds the model in full
precision: its peak is about the quantized model plus one checkpoint tensor.
A checkpoint's calibrated KV-cache scales (``self_attn.k_scale`` / ``v_scale``, or one
``kv_scale`` for both, as FP8 checkpoints with a KV-cache scheme ship them) become each attention
layer's ``KVScales``; they matter only with ``kv_cache_dtype = "fp8"``.
Checkpoints saved from the bare decoder (sentence-transformers embedding models such as
Qwen3-Embedding) name weights without the ``model.`` prefix; an embedding model needs no
``lm_head`` and gets none. A pipeline stage skips the weights of the other stages' layers
(the model's ``weight_target``) without reading them, and a tensor-parallel rank reads only the
rows its column-parallel layers take (their ``checkpoint_rows``).
"""

from __future__ import annotations

import torch
from torch import nn

from engine.errors import ModelLoadError
from engine.layers.quantized_linear import quantize_linears
from engine.loading.checkpoint import Checkpoint
from engine.loading.model_config import ModelConfig
from engine.models import model_class
from engine.quantization.kv_quant import KVScales
from engine.quantization.scheme import WeightQuant
from engine.worker.distributed import place

__all__ = ["load_model"]

_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
_KV_SCALES = {".self_attn.k_scale": "k", ".self_attn.v_scale": "v", ".self_attn.kv_scale": "kv"}


def load_model(
    ckpt: Checkpoint,
    config: ModelConfig,
    dtype: torch.dtype,
    device: torch.device,
    quant: WeightQuant | None = None,
    *,
    needs_lm_head: bool = True,
) -> nn.Module:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device if quant is None else torch.device("meta")):
            model = model_class(config)(config)
    finally:
        torch.set_default_dtype(previous)
    if not needs_lm_head and not config.tie_word_embeddings and hasattr(model, "lm_head"):
        del model.lm_head  # its vocab x hidden weight would only take memory
    if quant is not None:
        quantize_linears(model, quant, from_weights=False)
        _materialize(model, device)
    _load_weights(model, ckpt, config, quant)
    return model.eval()


def _materialize(model: nn.Module, device: torch.device) -> None:
    """Give a model built on the meta device uninitialized memory on ``device`` (every parameter is
    then loaded), keeping tied parameters tied, and its computed buffers (``reset_buffers``)."""
    made: dict[int, nn.Parameter] = {}
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            if id(param) not in made:
                made[id(param)] = nn.Parameter(torch.empty_like(param, device=device), requires_grad=False)
            setattr(module, name, made[id(param)])
        if any(b.is_meta for b in module.buffers(recurse=False)):
            reset = getattr(module, "reset_buffers", None)
            if reset is None:
                raise ModelLoadError(f"{type(module).__name__} has buffers a meta-device build cannot fill")
            reset(device)


def _load_weights(model: nn.Module, ckpt: Checkpoint, config: ModelConfig, quant: WeightQuant | None) -> None:
    params = dict(model.named_parameters())
    has_lm_head = hasattr(model, "lm_head")
    packed: dict[str, tuple[str, int | str]] = getattr(model, "packed_modules", {})
    weight_target = getattr(model, "weight_target", lambda name: name)

    def stage_name(name: str) -> str | None:
        """The checkpoint name as this model (this stage) holds it; None: not held here."""
        is_head = name == "lm_head.weight"
        if name.endswith(_IGNORED_SUFFIXES) or (is_head and (config.tie_word_embeddings or not has_lm_head)):
            return None
        if not name.startswith("model.") and not is_head:  # saved from the bare decoder
            name = "model." + name
        return weight_target(name)  # type: ignore[no-any-return]

    def packed_target(name: str) -> tuple[str, int | str | None]:
        for part, (packed_name, shard_id) in packed.items():
            if f".{part}." in name:
                return name.replace(f".{part}.", f".{packed_name}."), shard_id
        return name, None

    def rows(name: str) -> tuple[int, int] | None:
        """The rows of a checkpoint tensor this rank's shard takes (column-parallel layers and the
        vocabulary split on the first dimension); None: all of them."""
        held = stage_name(name)
        if held is None or quant is not None:  # quantized layers slice their scales their own way
            return None
        target, shard = packed_target(held)
        param = params.get(target)
        module = model.get_submodule(target.rsplit(".", 1)[0]) if param is not None else None
        take = getattr(module, "checkpoint_rows", None)
        return None if take is None else take(param, shard)

    # One whole rank reads whole files (from a sealed source that also checks every chunk tag
    # against the signed manifest); a pipeline stage reads only its own tensors, and a
    # tensor-parallel rank only its rows of those split on their first dimension.
    selective = place().world_size > 1
    loaded: set[str] = set()
    kv_scales: dict[str, dict[str, float]] = {}
    tensors = ckpt.weights(lambda n: stage_name(n) is not None, rows) if selective else ckpt.weights()
    for checkpoint_name, tensor in tensors:
        held = stage_name(checkpoint_name)
        if held is None:  # another pipeline stage's, or never loaded
            continue
        name = held
        suffix = next((s for s in _KV_SCALES if name.endswith(s)), None)
        if suffix is not None:
            kv_scales.setdefault(name.removesuffix(suffix), {})[_KV_SCALES[suffix]] = float(
                tensor.float().max()
            )
            continue
        if quant is not None:
            mapped = quant.parameter_for(name, tensor, ckpt.name)
            if mapped is None:
                continue
            name = mapped
        target, shard = packed_target(name)
        param = params.get(target)
        if param is None:
            raise ModelLoadError(f"{ckpt.name}: unexpected weight {name} for {config.architecture}")
        module = model.get_submodule(target.rsplit(".", 1)[0])
        loader = getattr(module, "weight_loader", None)
        with torch.no_grad():
            try:
                if loader is None:
                    _copy(param, tensor)
                elif shard is None:
                    loader(param, tensor)
                else:
                    loader(param, tensor, shard)
            except RuntimeError as exc:
                raise ModelLoadError(f"{ckpt.name}: weight {name} does not fit: {exc}") from exc
        loaded.add(target)
        if quant is not None and not quant.prequantized and f"{target}_scale" in params:
            loaded.add(f"{target}_scale")  # quantized from the weight as it loaded
    missing = sorted(set(params) - loaded)
    if missing:
        raise ModelLoadError(
            f"{ckpt.name}: checkpoint has no weight for {missing[0]} ({len(missing)} missing)"
        )
    if kv_scales:
        _set_kv_scales(model, kv_scales, ckpt.name)


def _set_kv_scales(model: nn.Module, found: dict[str, dict[str, float]], source: str) -> None:
    # found: "model.layers.3" -> {"k": .., "v": ..} or {"kv": ..}; a pipeline stage holds some
    # layers only, under their global numbers.
    ours = {id(attn) for attn in model.kv_layers()}  # type: ignore[operator]
    for name, attn in model.named_modules():
        if id(attn) not in ours:
            continue
        layer = name.removesuffix(".self_attn.attn")
        scales = found.get(layer, {})
        k, v = scales.get("k", scales.get("kv")), scales.get("v", scales.get("kv"))
        if k is None or v is None:
            raise ModelLoadError(f"{source}: KV-cache scales for some layers only (none for {layer})")
        try:
            attn.kv_scales = KVScales(k, v)
        except ValueError as exc:
            raise ModelLoadError(f"{source}: {layer}: {exc}") from exc


def _copy(param: nn.Parameter, tensor: torch.Tensor) -> None:
    if param.shape != tensor.shape:
        raise RuntimeError(f"shape {tuple(tensor.shape)} does not match {tuple(param.shape)}")
    param.data.copy_(tensor)
