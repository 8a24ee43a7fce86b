"""Schemathesis against a vendored cut of OpenAI's published spec (``openai_openapi.yaml``).

Requests generated from the spec's own request schemas go to a real gateway over the demo models;
every answer must be no 5xx, a 200 whose body (and, streamed, every chunk) conforms to the spec's
response schema, or a 400 that names the parameter it refuses from the documented set
(``gateway.parameter_support``). Two liberties are taken with the generated bodies, both so the
run exercises the gateway rather than 404s and long generations: ``model`` is one of the demo
models, and a request without a token limit gets ``max_tokens`` 8 (else each would decode 1,024
noise tokens).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
import requests
import schemathesis
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.specs.openapi.checks import response_schema_conformance

pytestmark = pytest.mark.integration

SPEC_PATH = Path(__file__).with_name("openai_openapi.yaml")
MODELS = ("demo-chat",)  # the analyst role of the default policy may use it

# What a schema-valid request may be refused for, by param: each is documented in
# gateway.parameter_support (unsupported) or is a limit of this server or its models.
DOCUMENTED_REFUSALS = {
    # not supported (gateway.parameter_support)
    "audio",
    "prediction",
    "web_search_options",
    "reasoning_effort",
    "verbosity",
    "moderation",
    "store",
    "service_tier",
    "modalities",
    "best_of",
    "suffix",
    "echo",
    "top_logprobs",  # without logprobs, as OpenAI refuses it
    # limits of the server or the model
    "max_tokens",  # above the caller's ceiling or the model's context
    "max_completion_tokens",
    "messages",  # context length exceeded, or a content part other than text
    "prompt",  # context length exceeded, empty, token ids (off by default), or over 16 prompts
    "logit_bias",  # token ids outside the model's vocabulary
    "n",  # at most 16 choices
    "logprobs",  # at most 20 alternatives
    "stop",  # at most 16 stop strings
    # tool calls (gateway.tool_plan): custom (non-function) tools, bad names or schemas, more than
    # 128 tools, a choice naming no tool, or a forced call beside response_format
    "tools",
    "tool_choice",
}


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(SPEC_PATH.read_text())
    return loaded


def _json_schema(node: Any) -> Any:
    """OpenAPI 3.0's ``nullable: true`` (which the spec still uses in places) as JSON Schema's null."""
    if isinstance(node, list):
        return [_json_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _json_schema(v) for k, v in node.items() if k != "nullable"}
    if node.get("nullable") is True:
        if isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out


def _validator(spec: dict[str, Any], name: str) -> Any:
    root = {"$ref": f"#/components/schemas/{name}", "components": _json_schema(spec["components"])}
    return jsonschema_rs.validator_for(root)


def _completion_chunk_validator(spec: dict[str, Any]) -> Any:
    """The spec describes completion chunks with the whole response's schema, whose finish_reason
    is a string; OpenAI's own server (and vLLM, and the SDKs) send null until the last chunk, as
    the chat chunk schema allows. That one field is made nullable; the rest is checked as is."""
    components = _json_schema(spec["components"])
    choice = components["schemas"]["CreateCompletionResponse"]["properties"]["choices"]["items"]
    reason = choice["properties"]["finish_reason"]
    reason["type"], reason["enum"] = ["string", "null"], [*reason["enum"], None]
    root = {"$ref": "#/components/schemas/CreateCompletionResponse", "components": components}
    return jsonschema_rs.validator_for(root)


def _sse_chunks(text: str) -> list[dict[str, Any]]:
    events = [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")]
    assert events and events[-1] == "[DONE]", text[-500:]
    return [json.loads(e) for e in events[:-1]]


class _Run:
    """Sends each generated case and checks its answer; tallies outcomes for the summary."""

    def __init__(self, gateway: Any, spec: dict[str, Any]) -> None:
        self.base = gateway.v1
        self.session = requests.Session()
        self.authorization = f"Bearer {gateway.token('alice', 'analyst')}"
        self.chunk_schemas = {
            "/chat/completions": _validator(spec, "CreateChatCompletionStreamResponse"),
            "/completions": _completion_chunk_validator(spec),
        }
        self.outcomes: Counter[str] = Counter()
        self.messages: set[str] = set()

    def check(self, case: Any, model: str, *, stream: bool = False) -> None:
        body = case.body
        if isinstance(body, dict):
            body["model"] = model
            if stream:
                body["stream"] = True
            if body.get("max_tokens") is None and body.get("max_completion_tokens") is None:
                body["max_tokens"] = 8
        case.headers = {**(case.headers or {}), "Authorization": self.authorization}
        if case.path_parameters and "model" in case.path_parameters:
            case.path_parameters["model"] = model
        response = case.call(base_url=self.base, session=self.session, timeout=60)
        status = response.status_code
        assert status < 500, f"{status} for {case.path}: {response.text[:500]}"
        if status == 400:
            error = json.loads(response.text)["error"]
            param = (error["param"] or "").split("[")[0].split(".")[0]  # messages[0].content[1].type
            assert param in DOCUMENTED_REFUSALS, f"undocumented refusal: {error} for {body}"
            self.outcomes[f"400 {param}: {error['code']}"] += 1
            self.messages.add(error["message"][:120])
            return
        assert status == 200, f"{status} for {case.path}: {response.text[:500]}"
        self.outcomes[
            f"200 {case.path}{' stream' if isinstance(body, dict) and body.get('stream') else ''}"
        ] += 1
        if response.headers["content-type"][0].startswith("text/event-stream"):
            validator = self.chunk_schemas[case.path]
            assert response.text.endswith("data: [DONE]\n\n"), f"{body} -> {response.text[-300:]}"
            for chunk in _sse_chunks(response.text):
                errors = [str(e) for e in validator.iter_errors(chunk)]
                assert not errors, f"chunk {chunk} does not conform: {errors[:3]}"
            return
        case.validate_response(response, checks=[response_schema_conformance])


def _drive(strategy: Any, max_examples: int, check: Any) -> None:
    @settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        derandomize=True,  # the same requests every run: a failure here is a regression, not luck
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def one(case: Any) -> None:
        check(case)

    one()


def test_generated_requests_get_conforming_answers(gateway: Any, spec: dict[str, Any]) -> None:
    schema = schemathesis.openapi.from_path(SPEC_PATH)
    run = _Run(gateway, spec)
    for path, method, examples, streamed in (
        ("/chat/completions", "POST", 100, 40),
        ("/completions", "POST", 80, 30),
        ("/models", "GET", 3, 0),
        ("/models/{model}", "GET", 3, 0),
    ):
        strategy = schema[path][method].as_strategy()
        for model in MODELS:
            _drive(strategy, examples, lambda case, model=model: run.check(case, model))
            if streamed:
                _drive(strategy, streamed, lambda case, model=model: run.check(case, model, stream=True))
    print(dict(sorted(run.outcomes.items())))
    print(*sorted(run.messages), sep="\n")
    # The run reached the models on every path, streamed and not (the spec's request schemas
    # are wide: about half of what they allow names a documented refusal).
    for kind in ("/chat/completions", "/chat/completions stream", "/completions", "/completions stream"):
        assert run.outcomes[f"200 {kind}"] >= 5, run.outcomes
