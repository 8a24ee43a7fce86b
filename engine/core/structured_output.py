"""What shape a request's output must take: any JSON object, a JSON schema, or a Lark grammar.

A ``StructuredOutput`` travels inside ``SamplingParams`` (and so over the engine wire). It holds
text only: the engine compiles it once per model and schema (``engine.sampling.grammar_compiler``)
and each sequence then decodes under a token mask that allows only continuations of a document
the grammar accepts, with EOS allowed only once the document is complete.

Tool calls build on the same seam: ``one_of`` constrains to a document valid under one of several
schemas (an ``anyOf``), and ``lark`` takes a whole grammar (llguidance's Lark dialect, in which
``%json{...}`` embeds a JSON schema), e.g. a model's tool-call wrapper around the arguments::

    StructuredOutput.lark('start: "<tool_call>" %json{"type": "object"} "</tool_call>"')
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

import msgspec

from engine.errors import InvalidRequestError

__all__ = ["StructuredOutput"]

_MAX_GRAMMAR_CHARS = 100_000


class StructuredOutput(msgspec.Struct, frozen=True, kw_only=True):
    kind: Literal["json_object", "json_schema", "lark"]
    """``json_object``: any JSON object. ``json_schema``: a document valid under ``schema``
    (strict: no properties beyond those listed). ``lark``: a document of ``grammar``."""
    schema: str | None = None
    """The JSON schema as JSON text (``json_schema`` only)."""
    grammar: str | None = None
    """A Lark grammar (``lark`` only)."""
    param: str = "response_format"
    """The request field the grammar came from, named by errors about it (``tools`` for a forced
    tool call)."""

    def __post_init__(self) -> None:
        text = self.schema if self.kind == "json_schema" else self.grammar if self.kind == "lark" else None
        if self.kind != "json_object" and not text:
            raise InvalidRequestError(f"{self.kind} output needs its {self._field}", param=self.param)
        if (self.kind != "json_schema" and self.schema is not None) or (
            self.kind != "lark" and self.grammar is not None
        ):
            raise InvalidRequestError(f"{self.kind} output takes no other grammar", param=self.param)
        if text is not None and len(text) > _MAX_GRAMMAR_CHARS:
            raise InvalidRequestError(
                f"the {self._field} is over {_MAX_GRAMMAR_CHARS} characters", param=self.param
            )

    @property
    def _field(self) -> str:
        return "schema" if self.kind == "json_schema" else "grammar"

    @classmethod
    def json_object(cls) -> StructuredOutput:
        return cls(kind="json_object")

    @classmethod
    def json_schema(cls, schema: dict[str, Any]) -> StructuredOutput:
        if not isinstance(schema, dict):
            raise InvalidRequestError("the JSON schema must be an object", param="response_format")
        return cls(kind="json_schema", schema=json.dumps(schema, separators=(",", ":")))

    @classmethod
    def one_of(cls, schemas: list[dict[str, Any]]) -> StructuredOutput:
        """A document valid under one of ``schemas`` (e.g. the arguments of one of several tools)."""
        if not schemas:
            raise InvalidRequestError("one_of needs at least one schema", param="response_format")
        return cls.json_schema(schemas[0] if len(schemas) == 1 else {"anyOf": list(schemas)})

    @classmethod
    def lark(cls, grammar: str, *, param: str = "response_format") -> StructuredOutput:
        return cls(kind="lark", grammar=grammar, param=param)

    @property
    def key(self) -> str:
        """Names the compiled grammar in the per-model cache."""
        digest = hashlib.sha256(f"{self.kind}\0{self.schema or self.grammar or ''}".encode()).hexdigest()
        return f"{self.kind}:{digest}"

    def __repr__(self) -> str:
        # A schema can carry business content (field names, enums): log its size only.
        return f"StructuredOutput(kind={self.kind!r}, chars={len(self.schema or self.grammar or '')})"
