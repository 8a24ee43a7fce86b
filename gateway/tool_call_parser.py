"""Tool calls read back out of a model's text, whole or as it streams, in the template's syntax.

One state machine serves every syntax (``engine.text.tool_syntax``) and both answers: a whole
answer is the stream fed at once. Text outside calls is content. Once a call's opening
``{"name": "f", "arguments":`` (``"parameters"`` for Llama) has been read, its start goes out
with the name, then the arguments' JSON text as it arrives, as OpenAI streams them:

    text    'Sure <tool_call>\\n{"name": "f", "arguments": {"a": 1}}\\n</tool_call>'
    events  Content('Sure ') CallStart(0, 'call_…', 'f') Arguments(0, '{"a": 1}')

Between calls only the syntax's filler may stand (markers, whitespace, ``,`` ``;`` ``[`` ``]``);
other text ends the run of calls and is content again. A JSON object that turns out not to be
a call (a Llama answer that is plain JSON) is content, whole. With ``max_calls`` (OpenAI's
``parallel_tool_calls: false``) calls beyond it are dropped.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from typing import Any

__all__ = ["Arguments", "CallStart", "Content", "ParsedCall", "ToolCallParser", "parse_whole"]


@dataclass(frozen=True)
class Content:
    text: str


@dataclass(frozen=True)
class CallStart:
    index: int
    id: str
    name: str


@dataclass(frozen=True)
class Arguments:
    index: int
    text: str


Event = Content | CallStart | Arguments


@dataclass(frozen=True)
class ParsedCall:
    id: str
    name: str
    arguments: str


_OPENERS = {"hermes": ("<tool_call>",), "mistral": ("[TOOL_CALLS]",), "llama3": ("<|python_tag|>",)}
_FILLERS = {
    "hermes": ("<tool_call>", "</tool_call>"),
    "mistral": ("[TOOL_CALLS]", "[", "]", ","),
    "llama3": ("<|python_tag|>", ";"),
}
_BARE_STARTS = {"llama3": "{", "mistral": "[{"}
"""How an answer that is all calls opens when the marker is a special token the decoder dropped."""
_HEAD = re.compile(r'\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*')


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


class ToolCallParser:
    def __init__(self, syntax: str, *, max_calls: int | None = None) -> None:
        if syntax not in _OPENERS:
            raise ValueError(f"unknown tool-call syntax {syntax!r}")
        self._syntax = syntax
        self._openers = _OPENERS[syntax]
        self._fillers = _FILLERS[syntax]
        self._max_calls = max_calls
        self._buf = ""
        """Text not yet decided on (a possible marker's prefix, or the call being read)."""
        self._in_calls = False
        self._seen_text = False
        self._obj: _CallObject | None = None
        self.num_calls = 0

    def feed(self, text: str) -> list[Event]:
        self._buf += text
        out: list[Event] = []
        while self._buf:
            if self._obj is not None:
                if not self._read_object(out):
                    break
            elif self._in_calls:
                if not self._read_filler(out):
                    break
            elif not self._read_text(out):
                break
        return _merged(out)

    def finish(self) -> list[Event]:
        """Whatever is still held: a cut-off call keeps what was sent, anything else is content."""
        out: list[Event] = []
        obj, self._obj = self._obj, None
        if obj is not None and not obj.has_started:
            out.append(Content(obj.text))
        elif self._buf and not self._in_calls:
            out.append(Content(self._buf))
        self._buf = ""
        return _merged(out)

    # -- states -------------------------------------------------------------------------------

    def _read_text(self, out: list[Event]) -> bool:
        buf = self._buf
        bare = _BARE_STARTS.get(self._syntax)
        if bare and not self._seen_text:
            # Llama's JSON call (Mistral's list of calls) is the whole answer, so only an answer
            # that opens with it is one.
            stripped = buf.lstrip()
            if len(stripped) < len(bare) and bare.startswith(stripped):
                return False
            self._seen_text = True
            if stripped.startswith(bare):
                self._buf, self._in_calls = stripped, True
                return True
        hits = [(buf.find(o), o) for o in self._openers if o in buf]
        if hits:
            at, opener = min(hits)
            if at:
                out.append(Content(buf[:at]))
            self._buf, self._in_calls = buf[at + len(opener) :], True
            return True
        keep = _partial_suffix(buf, self._openers)
        if len(buf) > keep:
            out.append(Content(buf[: len(buf) - keep]))
            self._buf = buf[len(buf) - keep :]
        return False

    def _read_filler(self, out: list[Event]) -> bool:
        buf = self._buf.lstrip()
        if not buf:
            self._buf = ""
            return False
        if buf.startswith("{"):
            self._obj, self._buf = _CallObject(), buf
            return True
        for filler in self._fillers:
            if buf.startswith(filler):
                self._buf = buf[len(filler) :]
                return True
        if any(f.startswith(buf) for f in self._fillers):
            self._buf = buf
            return False
        self._in_calls = False  # text after the calls
        self._buf = buf
        return True

    def _read_object(self, out: list[Event]) -> bool:
        obj = self._obj
        assert obj is not None
        used = obj.scan(self._buf)
        self._buf = self._buf[used:]
        keep = self._max_calls is None or self.num_calls < self._max_calls
        if not obj.has_started and obj.name is not None:
            obj.has_started = True
            obj.call_id = new_call_id()
            obj.is_dropped = not keep
            if keep:
                out.append(CallStart(self.num_calls, obj.call_id, obj.name))
        if obj.has_started and not obj.is_dropped and (piece := obj.take_arguments()):
            out.append(Arguments(self.num_calls, piece))
        if not obj.is_closed:
            return False
        self._obj = None
        whole = obj.whole_call()
        if not obj.has_started:
            if whole is None:
                out.append(Content(obj.text))
                self._in_calls = False
                return True
            name, arguments = whole
            if keep:
                out += [CallStart(self.num_calls, new_call_id(), name), Arguments(self.num_calls, arguments)]
                self.num_calls += 1
            return True
        if not obj.is_dropped:
            if not obj.num_sent and whole is not None:  # arguments that were not an object
                out.append(Arguments(self.num_calls, whole[1]))
            self.num_calls += 1
        return True


class _CallObject:
    """One ``{...}`` being read: JSON nesting tracked character by character."""

    def __init__(self) -> None:
        self.text = ""
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self.is_closed = False
        self.name: str | None = None
        self._args_at: int | None = None
        self._args_end: int | None = None
        """Where the streamable part of the arguments ends so far."""
        self.num_sent = 0
        self.has_started = False
        self.is_dropped = False
        self.call_id = ""

    def scan(self, text: str) -> int:
        """Read up to the object's end; returns how much of ``text`` belongs to it."""
        for i, ch in enumerate(text):
            self.text += ch
            closes = False
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif ch == "\\":
                    self._escaped = True
                elif ch == '"':
                    self._in_string = False
            elif ch == '"':
                self._in_string = True
            elif ch in "{[":
                self._depth += 1
            elif ch in "}]":
                self._depth -= 1
                closes = True
                if self._depth == 0:
                    self.is_closed = True
                    self._find_head()
                    return i + 1
            # The arguments' text runs on while it is inside their object (or closes it) and
            # follows on from what was already counted as theirs.
            is_inside = self._depth >= 2 or (self._depth == 1 and closes)
            follows = self._args_end is None or self._args_end >= len(self.text) - 1
            if self._args_at is not None and is_inside and follows:
                self._args_end = len(self.text)
            self._find_head()
        return len(text)

    def _find_head(self) -> None:
        if self.name is not None:
            return
        match = _HEAD.match(self.text)
        if match is None:
            return
        try:
            self.name = json.loads(f'"{match.group(1)}"')
        except json.JSONDecodeError:
            return
        self._args_at = match.end()

    def take_arguments(self) -> str:
        """The arguments' text read since the last call (an object's, streamed as it comes)."""
        if self._args_at is None or self._args_end is None:
            return ""
        if not self.num_sent:  # the space after the colon is not part of the arguments
            while self._args_at < self._args_end and self.text[self._args_at].isspace():
                self._args_at += 1
        start = self._args_at + self.num_sent
        piece = self.text[start : self._args_end]
        self.num_sent += len(piece)
        return piece

    def whole_call(self) -> tuple[str, str] | None:
        """(name, arguments JSON) if the object is a call; None if it is anything else."""
        try:
            value: Any = json.loads(self.text)
        except json.JSONDecodeError:
            return None
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            return None
        args = value.get("arguments", value.get("parameters"))
        if args is None:
            return None
        return value["name"], args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)


def _partial_suffix(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest end of ``text`` that could begin a marker."""
    best = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), best, -1):
            if marker.startswith(text[-n:]):
                best = n
                break
    return best


def _merged(events: list[Event]) -> list[Event]:
    out: list[Event] = []
    for e in events:
        if isinstance(e, Content) and not e.text:
            continue
        prev = out[-1] if out else None
        if isinstance(e, Content) and isinstance(prev, Content):
            out[-1] = Content(prev.text + e.text)
        elif isinstance(e, Arguments) and isinstance(prev, Arguments) and prev.index == e.index:
            out[-1] = Arguments(e.index, prev.text + e.text)
        else:
            out.append(e)
    return out


def parse_whole(syntax: str, text: str, *, max_calls: int | None = None) -> tuple[str, list[ParsedCall]]:
    """A whole answer's content and calls."""
    parser = ToolCallParser(syntax, max_calls=max_calls)
    content: list[str] = []
    calls: dict[int, list[str]] = {}
    for event in parser.feed(text) + parser.finish():
        if isinstance(event, Content):
            content.append(event.text)
        elif isinstance(event, CallStart):
            calls[event.index] = [event.id, event.name, ""]
        else:
            calls[event.index][2] += event.text
    return "".join(content), [ParsedCall(*calls[i]) for i in sorted(calls)]
