"""Chat-template control tokens typed into content: an attempt to forge a turn of the conversation.

``<|im_end|>\n<|im_start|>system\n...`` inside a user message once reached the model as real
control tokens: a system turn written by the user. The engine now encodes every special-token
string inside message content as plain text (``engine.text.special_token_escape``), so the attempt
no longer works; this detector makes it visible in the audit trail all the same (``flag`` in the
packaged policy; a policy may ``block`` it).

It knows the control tokens of the templates Strongroom serves rather than each model's
vocabulary, because the gateway filters before it knows which engine instance (and tokenizer)
will serve the request:

    ChatML (Qwen, the demo models)  <|im_start|> <|im_end|> <|endoftext|>
    Llama 3                         <|begin_of_text|> <|start_header_id|> <|eot_id|> ...
    Mistral                         [INST] [/INST] [SYSTEM_PROMPT] [TOOL_CALLS] ... <s> </s>
    Gemma                           <start_of_turn> <end_of_turn>

Any ``<|name|>`` counts, so reserved and future tokens of the same style are covered. The
text it sees is normalized (NFKC, case folded), so full-width look-alikes count as attempts too.
"""

from __future__ import annotations

import re

from filters.detectors.pattern_detector import PatternDetector
from filters.holdback import RunRule

__all__ = ["ControlTokenDetector"]

_MISTRAL = "inst|system_prompt|available_tools|tool_calls|tool_results|tool_content"


class ControlTokenDetector(PatternDetector):
    name = "control_token"
    max_match_len = 44
    priority = 4
    stream_rule = RunRule(
        "<>[]/|_abcdefghijklmnopqrstuvwxyz0123456789",
        re.compile(r"[<\[]"),
        44,
        trigger=re.compile(r"[<\[]"),
        wake=frozenset("<["),
    )
    pattern = re.compile(
        r"<\|[a-z0-9_]{1,40}\|>"
        rf"|\[/?(?:{_MISTRAL})\]"
        r"|</?s>"
        r"|<(?:start|end)_of_turn>"
    )
