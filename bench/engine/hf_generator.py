"""HF transformers as a streaming token source: the peer behind ``bench.serving.hf_server``.

Two implementations of one interface, ``HFGenerator.stream(prompt, max_new_tokens, ignore_eos)``,
an async iterator of newly generated token-id lists:

    cb        transformers' continuous batching manager (``model.init_continuous_batching``): one
              background thread batches every request in flight; each step's outputs come back on
              the event loop through ``register_result_handler``. HF's own serving path.
    generate  ``model.generate`` one request at a time (FIFO), tokens pushed out by a streamer;
              the fallback where the manager is missing or broken.

Sampling is the server's (``HFPeerConfig.temperature``): the manager takes one generation config
for all requests, so ``generate`` mode does the same. EOS is ignored per request (``ignore_eos``):
the manager gets no EOS id, ``generate`` gets ``min_new_tokens = max_new_tokens``.
torch and transformers are imported only when a generator is built.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

__all__ = ["GenerationError", "HFGenerator", "HFPeerConfig", "build_generator"]

MODES = ("cb", "generate")
DTYPES = ("float32", "bfloat16", "float16")


class GenerationError(Exception):
    """The model failed on a request (the manager reported an error, or generate raised)."""


@dataclass(frozen=True, slots=True)
class HFPeerConfig:
    model_dir: Path
    """A transformers checkpoint directory (config.json, weights, tokenizer)."""
    device: str = "cpu"
    """torch device: ``cpu``, ``cuda``, ``cuda:1``."""
    dtype: str | None = None
    """One of DTYPES; None: bfloat16 on CUDA, float32 on CPU."""
    mode: str = "cb"
    """``cb`` (continuous batching manager) or ``generate`` (sequential)."""
    attn_implementation: str = "sdpa"
    """Passed to ``from_pretrained``; the manager accepts sdpa, paged|eager and flash variants."""
    temperature: float = 1.0
    """Sampling temperature for every request; 0 is greedy."""
    num_threads: int | None = None
    """torch intra-op threads (``torch.set_num_threads``); None leaves torch's default."""
    num_blocks: int | None = None
    """Manager KV blocks; None lets transformers size the cache from free memory."""
    max_batch_tokens: int | None = None
    """Manager tokens per step; None lets transformers choose."""
    warmup: bool = True
    """Run the manager's warm-up (CUDA graph capture) before serving."""
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {self.mode!r}")
        if self.dtype is not None and self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, not {self.dtype!r}")
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        for name in ("num_threads", "num_blocks", "max_batch_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1")
        if not (self.model_dir / "config.json").is_file():
            raise ValueError(f"{self.model_dir} holds no config.json")

    @property
    def torch_dtype(self) -> str:
        return self.dtype or ("bfloat16" if self.device.startswith("cuda") else "float32")


class HFGenerator(Protocol):
    @property
    def info(self) -> dict[str, Any]:
        """What was actually built (mode, attention, dtype, cache sizes), for the result JSON."""
        ...

    def stream(
        self, prompt: list[int], max_new_tokens: int, ignore_eos: bool
    ) -> AsyncGenerator[list[int], None]:
        """New token ids as they are generated; closing the iterator early cancels the request."""
        ...

    def close(self) -> None: ...


def build_generator(config: HFPeerConfig) -> HFGenerator:
    import torch
    from transformers import AutoModelForCausalLM

    if config.num_threads is not None:
        torch.set_num_threads(config.num_threads)
    torch.manual_seed(config.seed)
    model: Any = AutoModelForCausalLM.from_pretrained(
        config.model_dir,
        dtype=getattr(torch, config.torch_dtype),
        attn_implementation=config.attn_implementation,
    )
    model = model.to(config.device).eval()
    if config.mode == "cb":
        return ContinuousBatchingGenerator(model, config)
    return SequentialGenerator(model, config)


def _untyped(cls: Any) -> Any:
    """transformers' GenerationConfig has an untyped constructor."""
    return cls


def _sampling(config: HFPeerConfig) -> dict[str, Any]:
    # top_k=0 / top_p=1: plain temperature sampling, as the OpenAI API means it.
    if config.temperature == 0:
        return {"do_sample": False}
    return {"do_sample": True, "temperature": config.temperature, "top_k": 0, "top_p": 1.0}


class ContinuousBatchingGenerator:
    def __init__(self, model: Any, config: HFPeerConfig) -> None:
        import torch
        from transformers import ContinuousBatchingConfig, GenerationConfig

        generation_config = _untyped(GenerationConfig)(
            **_sampling(config), max_new_tokens=256, eos_token_id=model.config.eos_token_id
        )
        cb_config = ContinuousBatchingConfig(
            num_blocks=config.num_blocks, max_batch_tokens=config.max_batch_tokens
        )
        self._manager = model.init_continuous_batching(
            generation_config=generation_config, continuous_batching_config=cb_config
        )
        if config.warmup:
            self._manager.warmup()
        with torch.inference_mode():  # the manager's thread inherits it (transformers >= 5.2x)
            self._manager.start()
        self._ids = itertools.count()
        self._info = {
            "mode": "cb",
            "attn_implementation": model.config._attn_implementation,
            "dtype": config.torch_dtype,
            "num_blocks": config.num_blocks,
            "max_batch_tokens": config.max_batch_tokens,
            "warmup": config.warmup,
        }

    @property
    def info(self) -> dict[str, Any]:
        return dict(self._info)

    async def stream(
        self, prompt: list[int], max_new_tokens: int, ignore_eos: bool
    ) -> AsyncGenerator[list[int], None]:
        request_id = f"req-{next(self._ids)}"
        outputs: asyncio.Queue[Any] = asyncio.Queue()
        self._manager.register_result_handler(request_id, outputs.put_nowait)
        added = self._manager.add_request(
            input_ids=prompt,
            request_id=request_id,
            max_new_tokens=max_new_tokens,
            streaming=True,
            eos_token_id=-1 if ignore_eos else None,  # -1: no EOS at all
        )
        if added is None:
            raise GenerationError("the continuous batching manager is not accepting requests")
        num_sent = 0
        finished = False
        try:
            while not finished:
                output = await outputs.get()
                if output.error:
                    raise GenerationError(str(output.error))
                # Each output holds every token generated so far; send the new ones.
                new = list(output.generated_tokens[num_sent:])
                num_sent += len(new)
                finished = output.is_finished()
                if new:
                    yield new
        finally:
            if not finished:
                self._manager.cancel_request(request_id)

    def close(self) -> None:
        self._manager.stop(block=True, timeout=30)


class SequentialGenerator:
    def __init__(self, model: Any, config: HFPeerConfig) -> None:
        self._model = model
        self._config = config
        self._turn = asyncio.Lock()  # FIFO: one generate call at a time
        self._info = {
            "mode": "generate",
            "attn_implementation": model.config._attn_implementation,
            "dtype": config.torch_dtype,
        }

    @property
    def info(self) -> dict[str, Any]:
        return dict(self._info)

    async def stream(
        self, prompt: list[int], max_new_tokens: int, ignore_eos: bool
    ) -> AsyncGenerator[list[int], None]:
        async with self._turn:
            streamer = _TokenStreamer(asyncio.get_running_loop())
            job = asyncio.ensure_future(
                asyncio.to_thread(self._generate, prompt, max_new_tokens, ignore_eos, streamer)
            )
            try:
                while (tokens := await streamer.queue.get()) is not None:
                    yield tokens
            finally:
                streamer.cancel()
                try:
                    await job
                except Exception as exc:
                    raise GenerationError(f"{type(exc).__name__}: {exc}") from exc

    def _generate(self, prompt: list[int], max_new_tokens: int, ignore_eos: bool, streamer: Any) -> None:
        import torch
        from transformers import GenerationConfig, StoppingCriteriaList

        eos = self._model.config.eos_token_id
        generation_config = _untyped(GenerationConfig)(
            **_sampling(self._config),
            max_new_tokens=max_new_tokens,
            min_new_tokens=max_new_tokens if ignore_eos else 0,
            eos_token_id=eos,
            pad_token_id=eos,
        )
        try:
            with torch.inference_mode():
                input_ids = torch.tensor([prompt], device=self._model.device)
                self._model.generate(
                    input_ids=input_ids,
                    attention_mask=torch.ones_like(input_ids),
                    generation_config=generation_config,
                    streamer=streamer,
                    stopping_criteria=StoppingCriteriaList([streamer.stopping_criterion]),
                )
        finally:
            streamer.end()

    def close(self) -> None:
        pass


class _TokenStreamer:
    """transformers' streamer protocol (``put``/``end``), handing token ids to an asyncio queue.

    ``generate`` first puts the prompt, then each step's token; ``cancel`` stops it at the next step.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.queue: asyncio.Queue[list[int] | None] = asyncio.Queue()
        self._loop = loop
        self._seen_prompt = False
        self._cancelled = threading.Event()

    def put(self, value: Any) -> None:
        if not self._seen_prompt:
            self._seen_prompt = True
            return
        self._loop.call_soon_threadsafe(self.queue.put_nowait, [int(t) for t in value.reshape(-1).tolist()])

    def end(self) -> None:
        self._loop.call_soon_threadsafe(self.queue.put_nowait, None)

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def stopping_criterion(self) -> Any:
        import torch
        from transformers import StoppingCriteria

        cancelled = self._cancelled

        class _Cancelled(StoppingCriteria):
            def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
                # input_ids: [batch, seq]; one flag per row
                return torch.full(
                    (input_ids.shape[0],), cancelled.is_set(), dtype=torch.bool, device=input_ids.device
                )

        return _Cancelled()
