"""A request that passed every check and holds a quota lease: what the engine call starts from."""

from __future__ import annotations

import msgspec

from common.finding import Finding
from engine.serving.client import EngineClient
from engine.serving.protocol import GenerateRequest, ModelCard
from gateway.openai_types import ChatCompletionRequest, CompletionRequest
from gateway.quota import QuotaLease
from gateway.request_context import RequestContext
from gateway.response_shape import ResponseShape, fingerprint_of
from gateway.tool_plan import ToolPlan

__all__ = ["Prepared"]


class Prepared(msgspec.Struct, kw_only=True):
    """A request that passed every check and holds a quota lease; ready for the engine."""

    kind: str
    ctx: RequestContext
    body: ChatCompletionRequest | CompletionRequest
    generate: GenerateRequest
    card: ModelCard
    client: EngineClient
    lease: QuotaLease
    findings: list[Finding]
    tools: ToolPlan | None = None
    early_end: str = "client disconnected"
    """What the record of a stream closed before its end says happened: the client left, unless
    whoever closed it knows better (a batch another of whose prompts was refused)."""

    @property
    def headers(self) -> dict[str, str]:
        """The lease's ``x-ratelimit-*`` headers (HTTP headers, gRPC initial metadata)."""
        return dict(getattr(self.lease, "headers", {}) or {})

    @property
    def shape(self) -> ResponseShape:
        """What the answer looks like: all the completion builder and the stream writer see."""
        params, card = self.generate.params, self.card
        tools = self.tools if self.tools is not None and self.tools.parses_calls else None
        return ResponseShape(
            is_chat=self.kind == "chat",
            model=self.body.model,
            num_choices=params.n,
            wants_logprobs=params.logprobs is not None,
            tool_syntax=tools.syntax if tools else "",
            max_tool_calls=tools.max_calls if tools else None,
            echo=(self.generate.prompt or "")
            if isinstance(self.body, CompletionRequest) and self.body.echo
            else "",
            system_fingerprint=fingerprint_of(
                card.name, card.manifest_sha256, card.dtype, card.max_model_len
            ),
        )
