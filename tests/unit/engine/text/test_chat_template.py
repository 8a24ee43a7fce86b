"""``tools`` and tool turns rendered through each family's template, and the calls read back.

The templates are small ones written here in each family's published conventions (how Qwen2.5,
Llama 3.1 and Mistral v0.3 checkpoints' templates lay out definitions, calls and results); the
demo model's is the one it ships.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.errors import InvalidRequestError
from engine.loading.demo import _CHAT_TEMPLATE
from engine.text.chat_template import ChatTemplate
from gateway.tool_call_parser import parse_whole

QWEN = """{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools

<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>

For each function call, return a json object within <tool_call></tool_call> XML tags.<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'tool' %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% elif not (tools and loop.first and message.role == 'system') %}<|im_start|>{{ message.role }}
{{ message.content }}
{%- for call in message.tool_calls or [] %}
<tool_call>
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

LLAMA = """{{ bos_token }}
{%- for message in messages %}
{%- if message.role == 'user' and loop.last and tools is defined and tools %}<|start_header_id|>user<|end_header_id|>

Given the following functions, respond with a JSON for a function call with its proper arguments.
Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.
{% for tool in tools %}{{ tool | tojson(indent=4) }}

{% endfor %}{{ message.content }}<|eot_id|>
{%- elif message.role == 'assistant' and message.tool_calls is defined %}<|start_header_id|>assistant<|end_header_id|>

{% for call in message.tool_calls %}{"name": "{{ call.function.name }}", "parameters": {{ call.function.arguments | tojson }}}{% endfor %}<|eom_id|>
{%- elif message.role == 'tool' %}<|start_header_id|>ipython<|end_header_id|>

{{ message.content }}<|eot_id|>
{%- else %}<|start_header_id|>{{ message.role }}<|end_header_id|>

{{ message.content }}<|eot_id|>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>

{% endif %}"""

MISTRAL = """{{ bos_token }}
{%- for message in messages %}
{%- if message.role == 'user' %}
{%- if tools and loop.last %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}[INST]{{ message.content }}[/INST]
{%- elif message.role == 'assistant' and message.tool_calls %}[TOOL_CALLS][
{%- for call in message.tool_calls %}{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}, "id": "{{ call.id }}"}{{ ", " if not loop.last }}{% endfor %}]{{ eos_token }}
{%- elif message.role == 'tool' %}[TOOL_RESULTS]{"content": {{ message.content | tojson }}, "call_id": "{{ message.tool_call_id }}"}[/TOOL_RESULTS]
{%- else %}{{ message.content }}{{ eos_token }}
{%- endif %}
{%- endfor %}"""

WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CALL = {
    "id": "call_abc",
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Oslo"}},
}
CHAT = [
    {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_abc", "content": '{"temp_c": 4}'},
    {"role": "user", "content": "And tomorrow?"},
]
SPECIALS = {"bos_token": "<s>", "eos_token": "</s>"}

FAMILIES = [
    # (template, syntax, what the assistant's call renders as, where the tool result goes)
    (QWEN, "hermes", "<tool_call>\n", '<tool_response>\n{"temp_c": 4}\n</tool_response>'),
    (_CHAT_TEMPLATE, "hermes", "<tool_call>\n", '<tool_response>\n{"temp_c": 4}\n</tool_response>'),
    (LLAMA, "llama3", '{"name": "get_weather", "parameters"', 'ipython<|end_header_id|>\n\n{"temp_c": 4}'),
    (
        MISTRAL,
        "mistral",
        "[TOOL_CALLS][",
        '[TOOL_RESULTS]{"content": "{\\"temp_c\\": 4}", "call_id": "call_abc"}',
    ),
]


@pytest.mark.parametrize(("source", "syntax", "call_marker", "result"), FAMILIES)
def test_tools_and_tool_turns_render_in_the_family_syntax(
    source: str, syntax: str, call_marker: str, result: str
) -> None:
    template = ChatTemplate(source, special_tokens=SPECIALS)
    assert template.tool_syntax == syntax
    rendered = template.render(CHAT, tools=[WEATHER])
    assert '"name": "get_weather"' in rendered and "Weather in a city" in rendered  # the definition
    assert call_marker in rendered and result in rendered
    without = template.render(CHAT[:1])
    assert "get_weather" not in without  # no tools: the template's plain chat


@pytest.mark.parametrize(("source", "syntax", "call_marker", "result"), FAMILIES)
def test_a_rendered_call_parses_back_to_itself(
    source: str, syntax: str, call_marker: str, result: str
) -> None:
    """What the template teaches the model to write is what the gateway reads."""
    rendered = ChatTemplate(source, special_tokens=SPECIALS).render(CHAT[:2], tools=[WEATHER])
    answer = rendered[rendered.rindex(call_marker) :]  # the assistant turn (not an example)
    for end in ("<|im_end|>", "<|eom_id|>", "</s>"):
        answer = answer.split(end)[0]
    content, calls = parse_whole(syntax, answer)
    assert content.strip() == ""
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Oslo"})]


def test_a_template_without_tool_support_refuses_tools() -> None:
    plain = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}", special_tokens={})
    assert plain.tool_syntax == ""
    with pytest.raises(InvalidRequestError) as err:
        plain.render(CHAT[:1], tools=[WEATHER])
    assert err.value.param == "tools"
