"""The offline Python API: load models, generate for a batch of prompts, return finished outputs.

from engine import LLM, SamplingParams
llm = LLM("path/to/model", dtype="float32", device="cpu")   # or LLM(models={"a": path_a, "b": path_b})
outs = llm.generate(["Hello"], SamplingParams(temperature=0, max_tokens=16))
outs[0].text, outs[0].token_ids, outs[0].finish_reason
vectors = LLM("path/to/Qwen3-Embedding").embed(["a query", "a passage"])   # unit-norm lists

LLM(path, tensor_parallel_size=2) splits every model over two processes (one per GPU on CUDA),
LLM(path, pipeline_parallel_size=2) its layers over two stages, and both together over four;
``close()`` (or leaving a ``with LLM(...) as llm:`` block) stops them.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from engine.config import EngineConfig, ModelSpec
from engine.core.outputs import CompletionOutput, RequestOutput, TokenLogprob
from engine.core.sampling_params import SamplingParams
from engine.errors import InvalidRequestError
from engine.llm_engine import LLMEngine
from engine.tuning import DEFAULT_TUNING, CudaTuning

__all__ = ["LLM"]

Prompt = str | list[int]


class LLM:
    def __init__(
        self,
        model: str | Path | None = None,
        *,
        models: Mapping[str, str | Path] | None = None,
        dtype: str = "float32",
        device: str = "cpu",
        max_model_len: int | None = None,
        quantization: str | None = None,
        kv_cache_dtype: str = "auto",
        kind: str | None = None,
        tuning: CudaTuning = DEFAULT_TUNING,
        **engine_options: Any,
    ) -> None:
        """``model`` is one checkpoint directory (hosted under its directory name); ``models`` maps
        names to directories. ``quantization`` ("fp8" | "int8") quantizes every model's linear
        weights as they load (``ModelSpec.quantization``); ``kv_cache_dtype`` ("auto" | "fp8") is
        what the KV cache stores keys and values as (``EngineConfig.kv_cache_dtype``); ``kind`` declares every model's kind
        ("chat" or "embedding"; None reads it from each checkpoint). ``engine_options`` are further
        ``EngineConfig`` fields; ``tuning`` the CUDA path's (``engine.tuning``)."""
        paths = dict(models or {})
        if model is not None:
            paths[Path(model).name or "model"] = model
        if not paths:
            raise InvalidRequestError("LLM needs a model path or models={name: path}")
        specs = tuple(
            ModelSpec(
                name=name,
                path=str(Path(p).absolute()),
                dtype=dtype,
                max_model_len=max_model_len,
                quantization=quantization,
                kind=kind,
            )
            for name, p in paths.items()
        )
        config = EngineConfig(models=specs, device=device, kv_cache_dtype=kv_cache_dtype, **engine_options)
        self.engine = LLMEngine(config, tuning=tuning)
        self._ids = itertools.count()

    def close(self) -> None:
        """Stop the other tensor- and pipeline-parallel ranks, if any."""
        self.engine.close()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def model_names(self) -> list[str]:
        return list(self.engine.models)

    def generate(
        self,
        prompts: Prompt | list[str] | list[list[int]],
        params: SamplingParams | list[SamplingParams] | None = None,
        *,
        model: str | None = None,
    ) -> list[RequestOutput]:
        """One output per prompt, in order. A list of ints is one token-id prompt; ``params`` is
        one for all prompts or one per prompt."""
        return self._run(_as_prompt_list(prompts), params or SamplingParams(), self._model(model))

    def chat(
        self,
        messages: list[dict[str, Any]] | list[list[dict[str, Any]]],
        params: SamplingParams | None = None,
        *,
        model: str | None = None,
    ) -> list[RequestOutput]:
        """Apply the model's chat template (with the generation prompt) and generate."""
        name = self._model(model)
        conversations = [messages] if messages and isinstance(messages[0], dict) else messages
        hosted = self.engine.model(name)
        if hosted.tokenizer.chat_template is None:
            raise InvalidRequestError(f"model {name} has no chat template", param="messages")
        prompts: list[Prompt] = []
        for conversation in conversations:
            prompts.append(hosted.tokenizer.encode_chat(conversation, add_special_tokens=False))  # type: ignore[arg-type]
        return self._run(prompts, params or SamplingParams(), name)

    def embed(
        self,
        texts: str | list[str] | list[list[int]],
        *,
        model: str | None = None,
        dimensions: int | None = None,
    ) -> list[list[float]]:
        """One unit-norm vector per text (a list of ints is one token-id input), in order;
        ``dimensions`` keeps that many leading values, re-normalised."""
        name = self._model(model)
        inputs = [self.engine.embedding_token_ids(name, t) for t in _as_prompt_list(texts)]
        request_id = str(next(self._ids))
        self.engine.add_embedding(request_id, name, inputs, dimensions=dimensions)
        while self.engine.has_work:
            self.engine.step()
        (job,) = [j for j in self.engine.take_embeddings() if j.request_id == request_id]
        return job.vectors

    def _model(self, model: str | None) -> str:
        return model if model is not None else next(iter(self.engine.models))

    def _run(
        self, prompts: list[Prompt], params: SamplingParams | list[SamplingParams], model: str
    ) -> list[RequestOutput]:
        per_prompt = params if isinstance(params, list) else [params] * len(prompts)
        if len(per_prompt) != len(prompts):
            raise InvalidRequestError(f"{len(per_prompt)} SamplingParams for {len(prompts)} prompts")
        ids = [str(next(self._ids)) for _ in prompts]
        outputs: dict[str, RequestOutput] = {}
        for request_id, prompt, params in zip(ids, prompts, per_prompt, strict=True):
            # The caller reads whole outputs: decode each once at its end, not per token.
            params = msgspec.structs.replace(params, output_text="final")
            seqs = self.engine.add_request(request_id, model, prompt, params)
            outputs[request_id] = RequestOutput(
                request_id=request_id,
                prompt_token_ids=seqs[0].prompt_token_ids,
                outputs=[
                    CompletionOutput(index=i, text="", token_ids=[], finish_reason=None)
                    for i in range(params.n)
                ],
            )
        while self.engine.has_work:
            for request_id, delta in self.engine.step():
                out = outputs[request_id].outputs[delta.index]
                out.text += delta.text
                out.token_ids.extend(delta.token_ids)
                out.finish_reason = delta.finish_reason
                if delta.logprobs is not None:
                    out.logprobs = (out.logprobs or []) + list[TokenLogprob](delta.logprobs)
        return [outputs[i] for i in ids]


def _as_prompt_list(prompts: Prompt | list[str] | list[list[int]]) -> list[Prompt]:
    if isinstance(prompts, str):
        return [prompts]
    if prompts and all(isinstance(t, int) for t in prompts):
        return [list(prompts)]  # type: ignore[arg-type]
    return list(prompts)  # type: ignore[arg-type]
