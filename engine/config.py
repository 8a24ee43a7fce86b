"""How an engine instance is set up: which models it hosts and how it shares memory among them.

Relative model paths are resolved by the caller against its data directory; this config never
touches the filesystem.
"""

from __future__ import annotations

import msgspec

from engine.core.cache_scope import CACHE_SCOPES
from engine.errors import EngineConfigError
from engine.quantization.kv_quant import KV_CACHE_DTYPES
from engine.quantization.scheme import QUANTIZATIONS

__all__ = ["DTYPES", "EngineConfig", "ModelSpec"]

DTYPES = ("float32", "float16", "bfloat16", "auto")


class ModelSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One hosted model."""

    name: str
    """The name clients ask for (the OpenAI ``model`` field)."""
    path: str
    """Hugging Face checkpoint directory; relative paths are relative to the data directory."""
    dtype: str = "float32"
    """Weight and activation dtype, and the KV cache's unless the engine's ``kv_cache_dtype`` is
    "fp8": float32, float16, bfloat16, or auto (the checkpoint's own)."""
    max_model_len: int | None = None
    """Longest prompt plus output; None takes the checkpoint's max_position_embeddings."""
    prefix_cache_scope: str = "subject"
    """Who shares cached prompt prefixes, and so could learn by timing what another sent:
    "subject" (each tenant and subject alone), "tenant" (everyone of a tenant; tokens without
    one stay alone) or "global" (everyone). Wider scopes reuse more; choose them only for
    models whose prompts are not confidential between users."""
    quantization: str | None = None
    """Quantize the linear layers' weights as they load: "fp8" (E4M3) or "int8" (W8A16), one
    scale per output channel; activations stay in ``dtype`` (the KV cache too, unless the engine's
    ``kv_cache_dtype`` is "fp8"). None serves the
    checkpoint as it is (a checkpoint quantized as FP8 or compressed-tensors 8-bit loads
    quantized by itself; asking for a quantization of one is an error)."""
    kind: str | None = None
    """"chat" (generates text: chat and completions) or "embedding" (``/v1/embeddings`` only, no
    KV cache); None reads it from the checkpoint (``engine.loading.model_kind``)."""
    sealed_model_id: str | None = None
    """A sealed checkpoint serves only under the model id it was sealed as; None requires that id
    to equal ``name``. Set it to serve a sealing under another name on purpose."""

    def __post_init__(self) -> None:
        if not self.name or any(c.isspace() for c in self.name):
            raise EngineConfigError(f"model name must be non-empty without spaces: {self.name!r}")
        if self.dtype not in DTYPES:
            raise EngineConfigError(f"model {self.name}: dtype must be one of {DTYPES}, not {self.dtype!r}")
        if self.prefix_cache_scope not in CACHE_SCOPES:
            raise EngineConfigError(
                f"model {self.name}: prefix_cache_scope must be one of {CACHE_SCOPES},"
                f" not {self.prefix_cache_scope!r}"
            )
        if self.quantization is not None and self.quantization not in QUANTIZATIONS:
            raise EngineConfigError(
                f"model {self.name}: quantization must be one of {QUANTIZATIONS}, not {self.quantization!r}"
            )
        if self.kind is not None and self.kind not in ("chat", "embedding"):
            raise EngineConfigError(f"model {self.name}: kind must be chat or embedding, not {self.kind!r}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise EngineConfigError(f"model {self.name}: max_model_len must be >= 2")


_DEMO_MODELS = (
    ModelSpec(name="demo-chat", path="models/demo-chat"),
    ModelSpec(name="demo-base", path="models/demo-base"),
    ModelSpec(name="demo-embed", path="models/demo-embed", kind="embedding"),
)


class EngineConfig(msgspec.Struct, frozen=True, kw_only=True):
    """One engine instance: its models, its device, and the one KV pool they share."""

    models: tuple[ModelSpec, ...] = _DEMO_MODELS
    """The hosted models; all of them draw KV blocks from one pool."""
    device: str = "cpu"
    """torch device string: cpu, cuda, cuda:1."""
    dtype: str | None = None
    """When set, overrides every model's dtype (e.g. bfloat16 on a GPU)."""
    kv_cache_bytes: int | None = None
    """Size of the shared KV pool (of each tensor-parallel rank); None sizes it by kv_cache_fraction."""
    kv_cache_dtype: str = "auto"
    """What the KV pool stores keys and values as: "auto" (each model's dtype) or "fp8"
    (float8_e4m3fn with one scale per layer for K and one for V, 1.0 unless the checkpoint ships
    calibrated ones: half the bytes of bfloat16, so about twice the blocks;
    ``engine.quantization.kv_quant``)."""
    kv_cache_fraction: float = 0.9
    """Share of the device memory still free after loading weights that the pool takes (GPU); on CPU
    a share of available RAM. Never more blocks than max_num_seqs full-length sequences need."""
    block_size: int = 16
    """Tokens per KV block (a power of two)."""
    max_num_seqs: int | None = None
    """Cap on sequences in the running batch, across all models. Unset: 256 on CUDA (a GPU's
    decode step costs about the same at 64 and at 256 rows, and a serving load of long answers
    keeps more than 64 streams running: capped at 64, arrivals queue for a free slot), 64 on CPU."""
    max_num_batched_tokens: int | None = None
    """Per-step token budget (decode tokens plus prefill chunks), across all models. Decodes are
    scheduled first and a longer prompt is prefilled in chunks over several steps, so this bounds
    how long one step, and so one token of every running stream, can take when prompts arrive.
    Unset: 8,192 on CUDA, 2,048 on CPU."""
    long_prefill_token_threshold: int | None = 1024
    """Most tokens one prompt's prefill takes in a step while other sequences run or wait; the
    rest of the budget goes to other arrivals and the step stays short. A lone prompt takes the
    whole budget. The default leaves prompts up to 1,024 tokens one chunk (most chat turns), and
    a longer one takes 1,024 tokens a step while others are scheduled. None: no cap but max_num_batched_tokens."""
    enable_prefix_caching: bool = True
    """Reuse the KV of full blocks whose prefix was already computed (per model, and within each
    model's ``prefix_cache_scope``)."""
    num_threads: int | None = None
    """torch intra-op threads on CPU; None leaves torch's default."""
    seed: int = 0
    """Seed for requests that sample without a seed of their own."""
    cuda_graphs: bool = True
    """On CUDA, replay captured graphs for decode steps of up to max_num_seqs sequences (one
    graph per batch-size bucket, all captured at start-up); False runs every step eagerly."""
    async_scheduling: bool = True
    """On CUDA, launch step N+1 before reading step N's tokens back, so host work overlaps the
    GPU (rows with penalties or logprobs wait for their tokens); False runs steps one by one."""

    tensor_parallel_size: int = 1
    """Processes (one per GPU; on CPU, one per share of the cores) that each hold a slice of
    every model: their own attention heads, MLP columns and vocabulary rows, and the KV of their
    own heads. Must divide every model's attention heads, KV heads and intermediate size. Above
    1, steps run eagerly: no fused CUDA step, CUDA graphs or asynchronous scheduling yet."""
    pipeline_parallel_size: int = 1
    """Pipeline stages, each running an equal share of every model's decoder layers (and
    keeping their KV): the first also the embedding, the last the final norm and LM head. Each
    stage has tensor_parallel_size ranks, so the instance runs tensor_parallel_size x
    pipeline_parallel_size processes (one per GPU). Must divide every model's layer count. A
    step's sequences go through the stages in up to pipeline_parallel_size micro-batches, so the
    stages work at once. Above 1, steps run eagerly, as with tensor parallelism."""
    spawned_ranks: int | None = None
    """How many of the ranks this host starts itself, rank 0 included (ranks 0..N-1); the others
    are started on other hosts (``strongroom engine-rank``, or torchrun, with MASTER_ADDR,
    MASTER_PORT, RANK, WORLD_SIZE and LOCAL_RANK) and rank 0 waits for them. None: all of them.
    Every rank serving a sealed model unwraps its data key through the key provider itself,
    spawned or started with ``strongroom engine-rank``; rank 0 never hands one over."""
    distributed_timeout_s: float = 300.0
    """How long a rank waits on the others inside a step before the instance fails (tensor or
    pipeline parallel only); a rank that dies is noticed at once."""

    def __post_init__(self) -> None:
        # Filled in here, so every reader sees the device's figure (and a config written back out
        # names it).
        cuda = self.device.startswith("cuda")
        if self.max_num_seqs is None:
            msgspec.structs.force_setattr(self, "max_num_seqs", 256 if cuda else 64)
        if self.max_num_batched_tokens is None:
            msgspec.structs.force_setattr(self, "max_num_batched_tokens", 8192 if cuda else 2048)
        if not self.models:
            raise EngineConfigError("engine needs at least one model")
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise EngineConfigError(f"duplicate model names in {names}")
        if self.dtype is not None and self.dtype not in DTYPES:
            raise EngineConfigError(f"dtype must be one of {DTYPES}, not {self.dtype!r}")
        if self.block_size < 1 or self.block_size & (self.block_size - 1) or self.block_size > 256:
            raise EngineConfigError("block_size must be a power of two in [1, 256]")
        if self.kv_cache_bytes is not None and self.kv_cache_bytes <= 0:
            raise EngineConfigError("kv_cache_bytes must be > 0")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise EngineConfigError(
                f"kv_cache_dtype must be one of {KV_CACHE_DTYPES}, not {self.kv_cache_dtype!r}"
            )
        if not 0 < self.kv_cache_fraction <= 1:
            raise EngineConfigError("kv_cache_fraction must be in (0, 1]")
        if self.seq_limit < 1:
            raise EngineConfigError("max_num_seqs must be >= 1")
        if self.token_budget < 1:
            raise EngineConfigError("max_num_batched_tokens must be >= 1")
        if self.long_prefill_token_threshold is not None and self.long_prefill_token_threshold < 1:
            raise EngineConfigError("long_prefill_token_threshold must be >= 1 (or unset)")
        if self.tensor_parallel_size < 1:
            raise EngineConfigError("tensor_parallel_size must be >= 1")
        if self.pipeline_parallel_size < 1:
            raise EngineConfigError("pipeline_parallel_size must be >= 1")
        if self.spawned_ranks is not None and not 1 <= self.spawned_ranks <= self.world_size:
            raise EngineConfigError(
                f"spawned_ranks must be in [1, {self.world_size}] (tensor_parallel_size x"
                f" pipeline_parallel_size), not {self.spawned_ranks}"
            )
        if self.distributed_timeout_s <= 0:
            raise EngineConfigError("distributed_timeout_s must be > 0")
        if self.num_threads is not None and self.num_threads < 1:
            raise EngineConfigError("num_threads must be >= 1")

    @property
    def seq_limit(self) -> int:
        """``max_num_seqs``, the device's default filled in."""
        assert self.max_num_seqs is not None  # __post_init__ fills it
        return self.max_num_seqs

    @property
    def token_budget(self) -> int:
        """``max_num_batched_tokens``, the device's default filled in."""
        assert self.max_num_batched_tokens is not None  # __post_init__ fills it
        return self.max_num_batched_tokens

    @property
    def world_size(self) -> int:
        """Ranks of the instance: tensor_parallel_size x pipeline_parallel_size."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    def dtype_of(self, spec: ModelSpec) -> str:
        """The dtype a model actually loads in (the engine-wide override wins)."""
        return self.dtype or spec.dtype
