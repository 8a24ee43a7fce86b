"""An OpenAI chat or completion body turned into the engine's ``GenerateRequest``.

Pure functions of the body (and the model card): the sampling parameters, the maximum output,
the context check, and the texts the request filters read, in the one order
``ChatFiltered`` puts back (contents, then call arguments, then tool definitions). Every input
error is a ``BadRequestError`` naming the parameter, as OpenAI names it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec

from engine.core.sampling_params import SamplingParams
from engine.core.structured_output import StructuredOutput
from engine.errors import EngineError
from engine.serving.protocol import GenerateRequest, ModelCard
from gateway.chat_filtered import ChatFiltered, tool_texts
from gateway.errors import BadRequestError
from gateway.openai_types import ChatCompletionRequest, CompletionRequest, ResponseFormat
from gateway.request_context import RequestContext
from gateway.tool_plan import ToolPlan

__all__ = [
    "asked_max_tokens",
    "check_context",
    "generate_request",
    "max_tokens_of",
    "sampling_params",
    "single_prompt",
    "texts_of",
]

Body = ChatCompletionRequest | CompletionRequest


def max_tokens_of(body: Body, card: ModelCard, default: int) -> int:
    """The output budget: the caller's (checked against the context), else ``default`` (at most
    half the context; ``InferenceService.prepare`` widens it once the prompt is counted)."""
    asked = asked_max_tokens(body)
    param = _max_tokens_param(body)
    if asked is None:
        return min(default, max(1, card.max_model_len // 2))
    if asked < 1:
        raise BadRequestError(f"{param} must be at least 1", param=param)
    if asked >= card.max_model_len:
        err = BadRequestError(
            f"{param} is too large: {asked}. This model supports at most "
            f"{card.max_model_len - 1} completion tokens, whereas you provided {asked}.",
            param=param,
        )
        err.code = "invalid_value"
        raise err
    return asked


def sampling_params(body: Body, max_tokens: int) -> SamplingParams:
    logprobs: int | None
    if isinstance(body, ChatCompletionRequest):
        logprobs = (body.top_logprobs or 0) if body.logprobs else None
    else:
        logprobs = body.logprobs
    try:
        return SamplingParams(
            temperature=1.0 if body.temperature is None else body.temperature,
            top_p=1.0 if body.top_p is None else body.top_p,
            top_k=body.top_k or 0,
            min_p=body.min_p or 0.0,
            max_tokens=max_tokens,
            stop=body.stop_list,
            seed=body.seed,
            presence_penalty=body.presence_penalty or 0.0,
            frequency_penalty=body.frequency_penalty or 0.0,
            repetition_penalty=body.repetition_penalty or 1.0,
            logprobs=logprobs,
            n=body.num_choices,
            logit_bias=_logit_bias(body.logit_bias),
            ignore_eos=body.ignore_eos,
            # A plain answer is read whole, after the response filters: the engine decodes its
            # text once at the end instead of every step (the same text, less engine host time).
            output_text="delta" if body.is_stream else "final",
            # A forced tool call's grammar is set once the definitions are filtered.
            structured=_structured(body.response_format),
        )
    except EngineError as exc:
        raise BadRequestError(exc.message, param=exc.param) from None


def generate_request(
    ctx: RequestContext,
    body: Body,
    params: SamplingParams,
    texts: list[str],
    tools: ToolPlan | None = None,
) -> GenerateRequest:
    """The engine's request, built from the texts as the request filters left them (in
    ``texts_of``'s order: contents, then call arguments, then tool definitions)."""
    common: dict[str, Any] = {
        "request_id": ctx.request_id,
        "model": body.model,
        "params": params,
        "tenant": ctx.principal.tenant if ctx.principal else None,
        "subject": ctx.principal.subject if ctx.principal else None,
    }
    if isinstance(body, ChatCompletionRequest):
        chat = ChatFiltered.of(body, texts, tools)
        if tools is not None and chat.tools is not None:
            # The forced call's grammar is built from the definitions as filtered: what the
            # policy took out of a schema (an example value, a const) reaches no engine.
            grammar = dataclasses.replace(tools, tools=tuple(chat.tools)).grammar()
            if grammar is not None:
                common["params"] = msgspec.structs.replace(params, structured=grammar)
        return GenerateRequest(messages=chat.messages, tools=chat.tools, **common)
    prompt = single_prompt(body.prompt)
    if isinstance(prompt, str):
        return GenerateRequest(prompt=texts[0], **common)
    return GenerateRequest(prompt_token_ids=prompt, **common)


def _structured(fmt: ResponseFormat | None) -> StructuredOutput | None:
    """The engine's grammar for an OpenAI ``response_format`` (the schema itself is checked by the
    engine, which compiles it: an invalid one is a 400 naming ``response_format``)."""
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return StructuredOutput.json_object()
    if fmt.json_schema is None:
        raise BadRequestError(
            "response_format json_schema needs a json_schema object", param="response_format"
        )
    if fmt.json_schema.schema is None:
        return StructuredOutput.json_object()
    return StructuredOutput.json_schema(fmt.json_schema.schema)


def asked_max_tokens(body: Body) -> int | None:
    asked = body.max_completion_tokens if isinstance(body, ChatCompletionRequest) else None
    return asked if asked is not None else body.max_tokens


def _max_tokens_param(body: Body) -> str:
    if isinstance(body, ChatCompletionRequest) and body.max_completion_tokens is not None:
        return "max_completion_tokens"
    return "max_tokens"


def check_context(body: Body, card: ModelCard, num_prompt: int, max_tokens: int) -> None:
    """OpenAI's 400 for a prompt plus an explicit max_tokens beyond the context window."""
    if num_prompt + max_tokens <= card.max_model_len:
        return
    where = "messages" if isinstance(body, ChatCompletionRequest) else "prompt"
    err = BadRequestError(
        f"This model's maximum context length is {card.max_model_len} tokens. However, you requested "
        f"{num_prompt + max_tokens} tokens ({num_prompt} in the {where}, {max_tokens} in the completion). "
        f"Please reduce the length of the {where} or completion.",
        param=where,
    )
    err.code = "context_length_exceeded"
    raise err


def _logit_bias(bias: dict[str, float] | None) -> tuple[tuple[int, float], ...]:
    """OpenAI's ``{"token id": bias}`` as (id, bias) pairs; the engine checks ranges and vocabulary."""
    if not bias:
        return ()
    pairs = []
    for key, value in bias.items():
        try:
            token_id = int(key)
        except ValueError:
            raise BadRequestError(
                f"logit_bias keys must be token ids, got '{key}'", param="logit_bias"
            ) from None
        pairs.append((token_id, float(value)))
    return tuple(sorted(pairs))


def texts_of(body: Body, *, allow_token_ids: bool) -> list[str]:
    """Every piece of caller text the request filters must see, in a fixed order."""
    if isinstance(body, ChatCompletionRequest):
        if not body.messages:
            raise BadRequestError("messages must not be empty", param="messages")
        try:
            out = [m.text() for m in body.messages]
        except msgspec.ValidationError as exc:
            raise BadRequestError(str(exc), param="messages") from None
        return out + tool_texts(body)
    prompt = single_prompt(body.prompt)
    if isinstance(prompt, str):
        return [prompt]
    if not allow_token_ids:
        # The request filters read text; token ids would carry content past them unseen.
        raise BadRequestError("token-id prompts are disabled (server.allow_token_id_prompts)", param="prompt")
    return []


def single_prompt(prompt: str | list[Any] | None) -> str | list[int]:
    """One prompt: a string or token ids, bare or as a one-element batch (None: the empty string)."""
    if prompt is None:
        return ""
    if isinstance(prompt, str):
        return prompt
    if len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
        if isinstance(prompt, str):
            return prompt
    if prompt and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt):
        return list(prompt)
    if not prompt:
        raise BadRequestError("prompt must not be empty", param="prompt")
    err = BadRequestError(
        "prompt must be a string or a list of token ids; a batch of several prompts is not supported",
        param="prompt",
    )
    err.code = "unsupported_parameter"
    raise err
