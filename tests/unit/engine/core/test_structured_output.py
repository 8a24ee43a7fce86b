"""Constrained decoding in the engine: even the random-weight demo model writes valid JSON."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import LLM, SamplingParams
from engine.core.structured_output import StructuredOutput
from engine.errors import InvalidRequestError
from engine.loading.demo import write_demo_model
from engine.serving.protocol import GenerateRequest

_PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"enum": ["teller", "auditor"]},
        "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2},
    },
    "required": ["name", "age", "role", "tags"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module", params=["demo-chat", "demo-base"])
def llm(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> LLM:
    path = write_demo_model(request.param, tmp_path_factory.mktemp("structured") / request.param)
    return LLM(path, kv_cache_bytes=8 << 20)


def _validate(doc: Any, schema: dict[str, Any]) -> None:
    # The schemas here use a handful of keywords: check them directly (no validator dependency).
    if "enum" in schema:
        assert doc in schema["enum"]
        return
    kind = schema["type"]
    if kind == "object":
        assert isinstance(doc, dict) and set(doc) == set(schema["required"])
        for key, sub in schema["properties"].items():
            _validate(doc[key], sub)
    elif kind == "array":
        assert isinstance(doc, list) and len(doc) <= schema.get("maxItems", len(doc))
        for item in doc:
            _validate(item, schema["items"])
    elif kind == "string":
        assert isinstance(doc, str) and len(doc) <= schema.get("maxLength", len(doc))
    elif kind == "integer":
        assert isinstance(doc, int) and not isinstance(doc, bool)
        assert schema.get("minimum", doc) <= doc <= schema.get("maximum", doc)
    elif kind == "boolean":
        assert isinstance(doc, bool)


def test_schema_constrains_sampled_and_greedy_output(llm: LLM) -> None:
    spec = StructuredOutput.json_schema(_PERSON)
    params = [SamplingParams(temperature=1.0, seed=i, max_tokens=96, structured=spec) for i in range(6)]
    params.append(SamplingParams(temperature=0, max_tokens=96, structured=spec))
    for out in llm.generate(["Hello"] * len(params), params):
        [choice] = out.outputs
        assert choice.finish_reason == "stop", choice.text
        _validate(json.loads(choice.text), _PERSON)


def test_each_child_of_n_has_its_own_grammar_state(llm: LLM) -> None:
    params = SamplingParams(seed=11, n=3, max_tokens=96, structured=StructuredOutput.json_schema(_PERSON))
    [out] = llm.generate(["Hello"], params)
    assert len({c.text for c in out.outputs}) > 1
    for choice in out.outputs:
        _validate(json.loads(choice.text), _PERSON)


def test_unconstrained_neighbours_keep_their_tokens(llm: LLM) -> None:
    free = [
        SamplingParams(temperature=0, max_tokens=12, ignore_eos=True),
        SamplingParams(temperature=0.8, seed=7, max_tokens=12),
    ]
    alone = [o.outputs[0].token_ids for o in llm.generate(["The bank", "Hello"], free)]
    constrained = SamplingParams(
        temperature=0, max_tokens=96, structured=StructuredOutput.json_schema(_PERSON)
    )
    mixed = llm.generate(["The bank", "Hello", "Hi"], [*free, constrained])
    assert [o.outputs[0].token_ids for o in mixed[:2]] == alone
    _validate(json.loads(mixed[2].outputs[0].text), _PERSON)


def test_truncated_document_finishes_with_length(llm: LLM) -> None:
    [out] = llm.generate(
        ["Hello"], SamplingParams(max_tokens=3, structured=StructuredOutput.json_schema(_PERSON))
    )
    assert out.outputs[0].finish_reason == "length"
    assert out.outputs[0].text.startswith("{")


def test_invalid_schema_is_refused_before_queueing(llm: LLM) -> None:
    bad = StructuredOutput.json_schema({"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}})
    with pytest.raises(InvalidRequestError) as err:
        llm.generate(["Hello"], SamplingParams(structured=bad))
    assert err.value.param == "response_format"
    assert not llm.engine.has_work


_LEAVES = st.sampled_from(
    [
        {"type": "boolean"},
        {"type": "integer", "minimum": -5, "maximum": 5},
        {"type": "string", "maxLength": 4},
        {"enum": ["a", "b", "c"]},
    ]
)


def _objects(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    props = st.dictionaries(st.sampled_from(["k", "v", "x", "id"]), children, min_size=1, max_size=3)
    arrays = children.map(lambda c: {"type": "array", "items": c, "maxItems": 2})
    return st.one_of(
        props.map(
            lambda p: {
                "type": "object",
                "properties": p,
                "required": sorted(p),
                "additionalProperties": False,
            }
        ),
        arrays,
    )


_SCHEMAS = st.recursive(_LEAVES, _objects, max_leaves=4).map(
    lambda s: (
        s
        if s.get("type") == "object"
        else {"type": "object", "properties": {"r": s}, "required": ["r"], "additionalProperties": False}
    )
)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schema=_SCHEMAS, seed=st.integers(0, 2**16))
def test_any_generated_schema_constrains_the_demo_model(llm: LLM, schema: dict[str, Any], seed: int) -> None:
    [out] = llm.generate(
        ["Hello"], SamplingParams(seed=seed, max_tokens=160, structured=StructuredOutput.json_schema(schema))
    )
    assert out.outputs[0].finish_reason == "stop", out.outputs[0].text
    _validate(json.loads(out.outputs[0].text), schema)


@pytest.mark.parametrize("codec", [msgspec.json, msgspec.msgpack])
def test_structured_output_crosses_the_engine_wire(codec: Any) -> None:
    spec = StructuredOutput.json_schema(_PERSON)
    sent = GenerateRequest(request_id="r", model="m", prompt="hi", params=SamplingParams(structured=spec))
    got = codec.decode(codec.encode(sent), type=GenerateRequest)
    assert got.params.structured == spec and json.loads(got.params.structured.schema or "") == _PERSON
    with pytest.raises(InvalidRequestError, match="needs its schema"):
        codec.decode(codec.encode({"kind": "json_schema"}), type=StructuredOutput)
