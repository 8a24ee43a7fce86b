"""Which OpenAI create parameters this gateway honours: nothing is silently ignored.

Every parameter of ``CreateChatCompletionRequest`` and ``CreateCompletionRequest`` in OpenAI's
published spec (``tests/integration/conformance/openai_openapi.yaml``) falls in one of three sets:

Supported (they change the answer): ``model``, ``messages`` (text and refusal content parts),
``prompt`` (one prompt, or a batch of them, streamed or not: ``gateway.prompt_batch``,
``gateway.batch_stream``; null or empty is the model's document boundary token, as OpenAI's
default ``<|endoftext|>``), ``echo`` (the prompt as the request filters passed it), ``max_tokens``,
``max_completion_tokens``, ``temperature``, ``top_p`` (0 is the smallest nucleus: the top
token), ``n``, ``stop`` (string, list or null), ``seed``,
``presence_penalty``, ``frequency_penalty``, ``logit_bias``, ``logprobs``, ``top_logprobs``,
``response_format``, ``stream``, ``stream_options``; ``user`` and ``safety_identifier`` go into
the audit record (capped there, ``audit.event_bounds``). ``tools``, ``tool_choice``,
``parallel_tool_calls``, ``functions`` and ``function_call`` belong to the tool-call work and are
not judged here.

Accepted and ignored by design (answering them differently would change nothing the client sees):
``store`` false, ``service_tier`` ``auto``/``default`` (one tier), ``modalities`` ``["text"]``,
``prompt_cache_key``/``prompt_cache_retention``/``prompt_cache_options`` (the prefix cache is
automatic and scoped per tenant and caller, ``engine.core.cache_scope``), ``metadata`` (validated
to OpenAI's limits; it tags stored completions, and none are stored), ``best_of`` equal to ``n``,
an empty ``suffix``.

Refused with a 400 naming the parameter (``param``), as OpenAI refuses what a model cannot do:
``store`` true, any other ``service_tier`` or ``modalities``, ``audio``, ``prediction``,
``web_search_options``, ``reasoning_effort``, ``verbosity``, ``moderation``, ``best_of`` other
than ``n``, a non-empty ``suffix``, ``top_logprobs`` without ``logprobs``, ``echo`` with
``logprobs`` (it would need the prompt's logprobs) or with a token-id prompt, and content parts other than text (``image_url``, ``input_audio``, ``file``:
``param`` is the part's path).
"""

from __future__ import annotations

from typing import Any

from gateway.errors import BadRequestError
from gateway.openai_types import ChatCompletionRequest, CompletionRequest

__all__ = ["refuse_unsupported"]

_NEVER_SUPPORTED = (
    "audio",
    "prediction",
    "web_search_options",
    "reasoning_effort",
    "verbosity",
    "moderation",
)
_ONE_TIER = (None, "auto", "default")
_MAX_METADATA_PAIRS = 16
_MAX_METADATA_KEY = 64
_MAX_METADATA_VALUE = 512


def refuse_unsupported(body: ChatCompletionRequest | CompletionRequest) -> None:
    """Raise BadRequestError (param set) for the first parameter this gateway cannot honour."""
    if isinstance(body, ChatCompletionRequest):
        _check_chat(body)
    else:
        _check_completion(body)


def _unsupported(param: str, what: str) -> BadRequestError:
    err = BadRequestError(f"{what} is not supported by this server", param=param)
    err.code = "unsupported_parameter"
    return err


def _check_chat(body: ChatCompletionRequest) -> None:
    for name in _NEVER_SUPPORTED:
        if getattr(body, name) is not None:
            raise _unsupported(name, f"'{name}'")
    if body.store:
        raise _unsupported("store", "store: true (stored completions)")
    if body.service_tier not in _ONE_TIER:
        raise _unsupported("service_tier", f"service_tier '{body.service_tier}'")
    if body.modalities is not None and any(m != "text" for m in body.modalities):
        raise _unsupported("modalities", "an output modality other than text")
    if body.top_logprobs is not None and not body.logprobs:
        raise BadRequestError("top_logprobs requires logprobs to be true", param="top_logprobs")
    for i, message in enumerate(body.messages):
        if isinstance(message.content, list):
            for j, part in enumerate(message.content):
                if part.type not in ("text", "refusal"):
                    raise _unsupported(f"messages[{i}].content[{j}].type", f"content part type '{part.type}'")
    _check_metadata(body.metadata)


def _check_metadata(metadata: dict[str, str] | None) -> None:
    if metadata is None:
        return
    if len(metadata) > _MAX_METADATA_PAIRS:
        raise BadRequestError(f"metadata holds at most {_MAX_METADATA_PAIRS} pairs", param="metadata")
    for key, value in metadata.items():
        if len(key) > _MAX_METADATA_KEY or len(value) > _MAX_METADATA_VALUE:
            raise BadRequestError(
                f"metadata keys are at most {_MAX_METADATA_KEY} characters, values {_MAX_METADATA_VALUE}",
                param="metadata",
            )


def _check_completion(body: CompletionRequest) -> None:
    if body.best_of is not None and body.best_of != body.num_choices:
        raise _unsupported("best_of", "best_of other than n")
    if body.suffix:
        raise _unsupported("suffix", "suffix (insertion)")
    if body.echo and body.logprobs is not None:
        raise _unsupported("echo", "echo with logprobs (the prompt's logprobs)")
    if body.echo and isinstance(body.prompt, list) and _has_token_ids(body.prompt):
        raise _unsupported("echo", "echo of a token-id prompt")


def _has_token_ids(prompt: list[Any]) -> bool:
    return any(isinstance(p, int | list) for p in prompt)
