"""What a chat or completion offers the audit record: its prompt and answer text, merged findings."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from audit.record import AuditContent
from common.finding import Finding
from gateway.chat_filtered import audited_messages
from gateway.engine_request import single_prompt
from gateway.openai_types import ChatCompletionRequest, CompletionRequest

__all__ = ["content_of", "merged"]


def content_of(body: ChatCompletionRequest | CompletionRequest, texts: dict[int, str]) -> AuditContent:
    """What content capture is offered (``audit.content_rules`` decide what is kept of it).

    The prompt as the client sent it: a chat's messages as JSON ``[{"role", "content"}]`` in
    order (with tool definitions, calls and call ids: ``gateway.chat_filtered``), a completion's
    prompt text (token ids as a JSON list). The completion as the client received it, after the
    response filters: one choice's text, or a JSON list of the choices' texts when ``n`` > 1.
    """
    prompt: str
    if isinstance(body, ChatCompletionRequest):
        prompt = msgspec.json.encode(audited_messages(body)).decode()
    else:
        single = single_prompt(body.prompt)
        prompt = single if isinstance(single, str) else msgspec.json.encode(single).decode()
    choices = [text for _, text in sorted(texts.items())]
    completion = choices[0] if len(choices) == 1 else msgspec.json.encode(choices).decode() if choices else ""
    return AuditContent(prompt=prompt, completion=completion)


def merged(findings: Sequence[Finding]) -> list[Finding]:
    """One finding per (type, action, direction), counts summed."""
    out: dict[tuple[str, str, str], int] = {}
    for f in findings:
        key = (f.type, f.action, f.direction)
        out[key] = out.get(key, 0) + f.count
    return [Finding(type=t, action=a, direction=d, count=c) for (t, a, d), c in out.items()]
