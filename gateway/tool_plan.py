"""What a chat request's ``tools`` and ``tool_choice`` ask of the engine and of the answer.

    tool_choice   template gets tools   generation                      answer parsed for calls
    none          yes                   free                            no
    auto          yes                   free                            yes
    required      yes                   grammar: 1 to 8 calls (1 if     yes
                                        parallel_tool_calls is false)
    {function}    yes                   grammar: a call of that one     yes

The grammar wraps each function's ``{"name", "arguments"}`` object (Llama: ``"parameters"``) in
the model's own call syntax (``engine.text.tool_syntax``), so even a model that has never seen a
tool writes a call that parses and whose arguments validate against the function's schema.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import msgspec

from engine.core.structured_output import StructuredOutput
from gateway.errors import BadRequestError
from gateway.openai_types import ChatCompletionRequest, NamedToolChoice, ToolDef

__all__ = ["ToolPlan"]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_MAX_TOOLS = 128
_EMPTY_OBJECT: dict[str, Any] = {"type": "object", "properties": {}}
_MAX_FORCED_CALLS = 8
"""Parallel calls a forced answer may hold: a bound, so a model that never stops calling ends."""

# (before the calls, between two calls, after the calls) in llguidance's Lark.
_WRAPPERS = {
    "hermes": ('"<tool_call>\\n"', '"\\n</tool_call>\\n<tool_call>\\n"', '"\\n</tool_call>"'),
    "mistral": ('"["', '", "', '"]"'),
    "llama3": ('""', '"; "', '""'),
}


@dataclass(frozen=True)
class ToolPlan:
    tools: tuple[dict[str, Any], ...]
    """The definitions as the chat template receives them (OpenAI's shape)."""
    choice: str
    """``none``, ``auto``, ``required`` or ``function``."""
    function: str | None
    """The forced function's name (``choice == "function"``)."""
    parallel: bool
    syntax: str

    @classmethod
    def of(cls, body: ChatCompletionRequest, syntax: str, model: str) -> ToolPlan | None:
        """The plan for ``body`` on a model whose template writes calls in ``syntax``; None when
        the request names no tools. Raises BadRequestError (``param`` set) for bad definitions."""
        choice = body.tool_choice
        if not body.tools:
            if isinstance(choice, NamedToolChoice) or choice == "required":
                raise BadRequestError("tool_choice needs tools", param="tool_choice")
            return None
        if not syntax:
            raise BadRequestError(f"the model '{model}' does not support tools", param="tools")
        tools = _checked(body.tools)
        names = [t["function"]["name"] for t in tools]
        function = None
        if isinstance(choice, NamedToolChoice):
            function = choice.function.name
            if function not in names:
                raise BadRequestError(
                    f"tool_choice names an unknown function {function!r}", param="tool_choice"
                )
        mode = "function" if function else str(choice or "auto")
        fmt = body.response_format
        if mode in ("required", "function") and fmt is not None and fmt.type != "text":
            raise BadRequestError(
                "a forced tool call cannot also follow response_format", param="tool_choice"
            )
        return cls(
            tools=tuple(tools),
            choice=mode,
            function=function,
            parallel=body.parallel_tool_calls is not False,
            syntax=syntax,
        )

    @property
    def parses_calls(self) -> bool:
        return self.choice != "none"

    @property
    def max_calls(self) -> int | None:
        return None if self.parallel else 1

    def grammar(self) -> StructuredOutput | None:
        """The forced call's grammar; None when the model may answer freely."""
        if self.choice not in ("required", "function"):
            return None
        key = "parameters" if self.syntax == "llama3" else "arguments"
        schemas = [
            {
                "type": "object",
                "properties": {
                    "name": {"const": t["function"]["name"]},
                    key: t["function"].get("parameters") or _EMPTY_OBJECT,
                },
                "required": ["name", key],
                "additionalProperties": False,
            }
            for t in self.tools
            if self.function is None or t["function"]["name"] == self.function
        ]
        schema: dict[str, Any] = dict(schemas[0]) if len(schemas) == 1 else {"anyOf": schemas}
        # Compact JSON: no whitespace a random model could fill until max_tokens.
        schema["x-guidance"] = {"whitespace_flexible": False}
        call = json.dumps(schema, separators=(",", ":"))
        before, between, after = _WRAPPERS[self.syntax]
        many = self.parallel and self.function is None
        calls = f"call ({between} call){{0,{_MAX_FORCED_CALLS - 1}}}" if many else "call"
        return StructuredOutput.lark(f"start: {before} {calls} {after}\ncall: %json{call}\n", param="tools")


def _checked(tools: list[ToolDef]) -> list[dict[str, Any]]:
    if len(tools) > _MAX_TOOLS:
        raise BadRequestError(f"at most {_MAX_TOOLS} tools are allowed", param="tools")
    seen: set[str] = set()
    out = []
    for i, tool in enumerate(tools):
        fn = tool.function
        if not _NAME.match(fn.name):
            raise BadRequestError(
                "a function name is 1 to 64 letters, digits, '_' or '-'", param=f"tools[{i}].function.name"
            )
        if fn.name in seen:
            raise BadRequestError(f"function {fn.name!r} is defined twice", param=f"tools[{i}].function.name")
        seen.add(fn.name)
        params = fn.parameters
        if params is not None and params.get("type", "object") != "object":
            raise BadRequestError(
                "function parameters must be a JSON schema of an object",
                param=f"tools[{i}].function.parameters",
            )
        out.append(msgspec.to_builtins(tool))
    return out
