"""How a model's chat template writes tool calls, read from the template's own text.

Each family has one syntax, and the template that teaches it to the model spells it out:

    hermes   (Qwen2.5, Qwen3, Hermes)  <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
    mistral  (Mistral, Mixtral)        [TOOL_CALLS][{"name": "f", "arguments": {...}}]
    llama3   (Llama 3.1 / 3.2 JSON)    {"name": "f", "parameters": {...}}  (<|python_tag|> optional)

A template that mentions none of them takes no tools (``""``): the gateway then refuses ``tools``.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["ToolSyntax", "tool_syntax_of"]

ToolSyntax = Literal["hermes", "mistral", "llama3", ""]


def tool_syntax_of(template_source: str) -> ToolSyntax:
    if "tools" not in template_source:
        return ""
    if "<tool_call>" in template_source:
        return "hermes"
    if "[TOOL_CALLS]" in template_source:
        return "mistral"
    if "<|python_tag|>" in template_source or '"parameters"' in template_source:
        return "llama3"
    return ""
