"""A model's chat template, rendered the way Hugging Face ``apply_chat_template`` renders it.

Templates come with the checkpoint, so they run in jinja2's immutable sandbox: no attribute
access to internals, no mutation of the messages, no file or import access.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from engine.errors import InvalidRequestError, ModelLoadError
from engine.text.tool_syntax import ToolSyntax, tool_syntax_of

__all__ = ["ChatTemplate"]


def _raise_exception(message: str) -> None:
    raise jinja2.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: Any = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols], autoescape=False
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


class ChatTemplate:
    """One compiled template plus the special tokens it may refer to."""

    def __init__(self, source: str, *, special_tokens: dict[str, str], origin: str = "") -> None:
        try:
            self._template = _environment().from_string(source)
        except jinja2.TemplateError as exc:
            raise ModelLoadError(f"{origin}: chat template does not compile: {exc}") from exc
        self._special_tokens = dict(special_tokens)
        self.tool_syntax: ToolSyntax = tool_syntax_of(source)
        """How this template writes tool calls; empty if it takes no tools."""

    def render(
        self,
        messages: list[dict[str, Any]],
        *,
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
        **extra: Any,
    ) -> str:
        """``tools`` is HF's ``apply_chat_template(tools=)``: left undefined when there are none,
        since templates test ``tools is not none`` or ``tools is defined``."""
        if not messages:
            raise InvalidRequestError("messages must not be empty", param="messages")
        if tools:
            if not self.tool_syntax:
                raise InvalidRequestError("this model's chat template takes no tools", param="tools")
            extra["tools"] = tools
        try:
            return self._template.render(
                messages=messages,
                add_generation_prompt=add_generation_prompt,
                **self._special_tokens,
                **extra,
            )
        except jinja2.TemplateError as exc:
            raise InvalidRequestError(
                f"chat template rejected the messages: {exc}", param="messages"
            ) from exc
        except (TypeError, KeyError, AttributeError) as exc:
            raise InvalidRequestError(
                f"messages do not fit the chat template: {exc}", param="messages"
            ) from exc

    def __repr__(self) -> str:
        return "ChatTemplate(...)"
