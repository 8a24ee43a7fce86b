"""response_format through the real gateway and engine, driven by the official openai SDK."""

from __future__ import annotations

import json
from typing import Any, Literal

import openai
import pytest
from openai import OpenAI
from pydantic import BaseModel, Field

pytestmark = pytest.mark.integration


class Transfer(BaseModel):
    payee: str = Field(max_length=8)
    amount: int = Field(ge=0, le=1000)
    currency: Literal["EUR", "USD"]
    urgent: bool


def client(gateway: Any) -> OpenAI:
    return OpenAI(base_url=gateway.v1, api_key=gateway.token("alice", "analyst"), max_retries=0, timeout=60)


def test_parse_with_a_pydantic_model_validates(gateway: Any) -> None:
    c = client(gateway)
    for seed in (1, 2, 3):
        chat = c.beta.chat.completions.parse(
            model="demo-chat",
            messages=[{"role": "user", "content": "Pay Bob"}],
            response_format=Transfer,
            max_tokens=120,
            seed=seed,
        )
        choice = chat.choices[0]
        assert choice.finish_reason == "stop"
        assert isinstance(choice.message.parsed, Transfer)  # the SDK validated it against the model


def test_json_schema_on_completions_and_streamed_chat(gateway: Any) -> None:
    c = client(gateway)
    fmt = {
        "type": "json_schema",
        "json_schema": {"name": "t", "schema": Transfer.model_json_schema(), "strict": True},
    }
    done = c.completions.create(
        model="demo-chat", prompt="x", max_tokens=120, seed=5, extra_body={"response_format": fmt}
    )
    Transfer.model_validate_json(done.choices[0].text)
    stream = c.chat.completions.create(
        model="demo-chat",
        messages=[{"role": "user", "content": "Hi"}],
        max_tokens=120,
        seed=4,
        stream=True,
        response_format=fmt,  # type: ignore[arg-type]
    )
    Transfer.model_validate_json("".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices))


def test_truncated_output_reports_length(gateway: Any) -> None:
    c = client(gateway)
    chat = c.chat.completions.create(
        model="demo-chat",
        messages=[{"role": "user", "content": "Hi"}],
        max_tokens=4,
        response_format={"type": "json_object"},
    )
    assert chat.choices[0].finish_reason == "length"
    with pytest.raises(json.JSONDecodeError):
        json.loads(chat.choices[0].message.content or "")
    with pytest.raises(openai.LengthFinishReasonError):
        c.beta.chat.completions.parse(
            model="demo-chat",
            messages=[{"role": "user", "content": "Hi"}],
            response_format=Transfer,
            max_tokens=4,
        )


def test_invalid_schema_is_a_400_naming_response_format(gateway: Any) -> None:
    c = client(gateway)
    bad = {
        "type": "json_schema",
        "json_schema": {"name": "b", "schema": {"type": "object", "properties": {"a": {"type": "strin"}}}},
    }
    with pytest.raises(openai.BadRequestError) as err:
        c.chat.completions.create(
            model="demo-chat", messages=[{"role": "user", "content": "Hi"}], response_format=bad
        )  # type: ignore[arg-type]
    assert err.value.body["param"] == "response_format"  # type: ignore[index]
    assert "strin" in err.value.body["message"]  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as err:
        c.chat.completions.create(
            model="demo-chat",
            messages=[{"role": "user", "content": "Hi"}],
            response_format={"type": "json_schema"},  # type: ignore[typeddict-item]
        )
    assert err.value.body["param"] == "response_format"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as err:
        c.chat.completions.create(
            model="demo-chat",
            messages=[{"role": "user", "content": "Hi"}],
            response_format={"type": "xml"},  # type: ignore[arg-type,misc]
        )
    assert "response_format" in str(err.value.body)
