"""Proto messages to the OpenAI bodies the pipeline checks, and its answers back to proto."""

from __future__ import annotations

import pytest

from gateway.errors import BadRequestError
from gateway.grpc_api import inference_pb2 as pb
from gateway.grpc_api.messages import (
    chat_request,
    completion_request,
    embedding_request,
    mapped,
    model_list,
    proto_of,
)
from gateway.openai_types import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatLogprobs,
    ChatMessageOut,
    ChunkDelta,
    Completion,
    CompletionChoice,
    CompletionChunk,
    CompletionLogprobs,
    FunctionDelta,
    ModelObject,
    NamedToolChoice,
    TokenLogprobOut,
    ToolCall,
    ToolCallDelta,
    ToolFunction,
    TopLogprob,
    Usage,
)


def test_a_chat_request_reads_as_its_openai_body() -> None:
    message = pb.ChatCompletionRequest(
        model="m",
        messages=[pb.ChatMessage(role="user", content="hi")],
        temperature=0.25,
        seed=2**40,
        stop=["\n"],
        include_usage=True,
        logit_bias={"7": -100.0},
        tools=[pb.Tool(type="function", function=pb.FunctionDefinition(name="f"))],
        tool_choice=pb.ToolChoice(function_name="f"),
    )
    message.tools[0].function.parameters.update({"type": "object", "properties": {}})
    body = chat_request(message, stream=True)
    assert body.is_stream and body.include_usage
    assert (body.temperature, body.seed, body.stop_list) == (0.25, 2**40, ("\n",))
    assert body.top_p is None and body.max_tokens is None  # unset optional fields are OpenAI's null
    assert body.logit_bias == {"7": -100.0}
    assert body.messages[0].role == "user" and body.messages[0].text() == "hi"
    assert body.tools is not None and body.tools[0].function.parameters == {
        "type": "object",
        "properties": {},
    }
    assert isinstance(body.tool_choice, NamedToolChoice) and body.tool_choice.function.name == "f"
    assert (
        chat_request(
            pb.ChatCompletionRequest(model="m", tool_choice=pb.ToolChoice(mode="auto")), stream=False
        ).tool_choice
        == "auto"
    )


def test_a_wrong_role_is_a_400_naming_messages() -> None:
    with pytest.raises(BadRequestError) as err:
        chat_request(
            pb.ChatCompletionRequest(model="m", messages=[pb.ChatMessage(role="root")]), stream=False
        )
    assert err.value.param == "messages"


def test_a_completion_prompt_is_text_or_token_ids_and_max_tokens_defaults_to_16() -> None:
    assert completion_request(pb.CompletionRequest(model="m", text="Hi"), stream=False).prompt == "Hi"
    ids = completion_request(pb.CompletionRequest(model="m", token_ids=pb.TokenIds(ids=[1, 2])), stream=False)
    assert ids.prompt == [1, 2] and ids.max_tokens == 16
    assert completion_request(pb.CompletionRequest(model="m"), stream=False).prompt is None


def test_embedding_inputs_are_texts_or_token_ids_never_both() -> None:
    assert embedding_request(pb.EmbeddingRequest(model="e", input=["a", "b"])).input == ["a", "b"]
    ids = embedding_request(pb.EmbeddingRequest(model="e", input_token_ids=[pb.TokenIds(ids=[3])]))
    assert ids.input == [[3]] and ids.encoding_format == "float"
    with pytest.raises(BadRequestError):
        embedding_request(pb.EmbeddingRequest(model="e", input=["a"], input_token_ids=[pb.TokenIds(ids=[3])]))


def test_answers_become_their_proto_messages() -> None:
    usage = Usage(prompt_tokens=3, completion_tokens=2, total_tokens=5)
    chat = ChatCompletion(
        id="chatcmpl-1",
        created=9,
        model="m",
        usage=usage,
        system_fingerprint="fp_1",
        choices=[
            ChatChoice(
                index=0,
                message=ChatMessageOut(
                    content=None,
                    tool_calls=[ToolCall(id="call_1", function=ToolFunction(name="f", arguments="{}"))],
                ),
                finish_reason="tool_calls",
            )
        ],
    )
    out = proto_of(chat, pb.ChatCompletion())
    assert (out.id, out.object, out.usage.total_tokens, out.system_fingerprint) == (
        "chatcmpl-1",
        "chat.completion",
        5,
        "fp_1",
    )
    assert not out.choices[0].message.HasField("content")
    assert out.choices[0].message.tool_calls[0].function.name == "f"
    completion = Completion(
        id="cmpl-1",
        created=9,
        model="m",
        usage=usage,
        system_fingerprint="fp_1",
        choices=[
            CompletionChoice(
                index=0,
                text="ab",
                finish_reason="length",
                logprobs=CompletionLogprobs(
                    tokens=["a", "b"],
                    token_logprobs=[-0.5, -1.0],
                    top_logprobs=[{"a": -0.5}, {"b": -1.0}],
                    text_offset=[0, 1],
                ),
            )
        ],
    )
    logprobs = proto_of(completion, pb.Completion()).choices[0].logprobs
    assert list(logprobs.tokens) == ["a", "b"] and dict(logprobs.top_logprobs[1].top) == {"b": -1.0}
    models = model_list([ModelObject(id="m", created=1, max_model_len=4096, kind="chat")])
    assert models.data[0].max_model_len == 4096 and not models.data[0].HasField("quantization")


def _chat_chunks() -> list[ChatCompletionChunk]:
    head = {"id": "chatcmpl-1", "created": 9, "model": "m", "system_fingerprint": "fp_1"}
    logprobs = ChatLogprobs(
        content=[
            TokenLogprobOut(
                token="a",
                logprob=-0.5,
                bytes=[97],
                top_logprobs=[TopLogprob(token="b", logprob=-1.0, bytes=None)],
            )
        ]
    )
    return [
        ChatCompletionChunk(
            **head, choices=[ChatChunkChoice(index=0, delta=ChunkDelta(role="assistant", content=""))]
        ),
        ChatCompletionChunk(
            **head, choices=[ChatChunkChoice(index=1, delta=ChunkDelta(content="a"), logprobs=logprobs)]
        ),
        ChatCompletionChunk(
            **head,
            choices=[
                ChatChunkChoice(
                    index=0,
                    delta=ChunkDelta(
                        tool_calls=[
                            ToolCallDelta(
                                index=0,
                                id="call_1",
                                type="function",
                                function=FunctionDelta(name="f", arguments=""),
                            ),
                            ToolCallDelta(index=0, function=FunctionDelta(arguments='{"x"')),
                        ]
                    ),
                )
            ],
        ),
        ChatCompletionChunk(
            **head, choices=[ChatChunkChoice(index=0, delta=ChunkDelta(), finish_reason="content_filter")]
        ),
        ChatCompletionChunk(
            **head, choices=[], usage=Usage(prompt_tokens=1, completion_tokens=2, total_tokens=3)
        ),
    ]


def _completion_chunks() -> list[CompletionChunk]:
    head = {"id": "cmpl-1", "created": 9, "model": "m", "system_fingerprint": "fp_1"}
    logprobs = CompletionLogprobs(
        tokens=["a"], token_logprobs=[-0.5], top_logprobs=[{"a": -0.5, "b": -2.0}], text_offset=[3]
    )
    return [
        CompletionChunk(**head, choices=[CompletionChoice(index=0, text="Hi", finish_reason=None)]),
        CompletionChunk(
            **head, choices=[CompletionChoice(index=2, text="a", finish_reason="stop", logprobs=logprobs)]
        ),
        CompletionChunk(
            **head, choices=[], usage=Usage(prompt_tokens=1, completion_tokens=2, total_tokens=3)
        ),
    ]


def test_chunks_built_field_by_field_equal_the_json_mapping() -> None:
    for chunk in _chat_chunks():
        assert proto_of(chunk, pb.ChatCompletionChunk()) == mapped(chunk, pb.ChatCompletionChunk()), chunk
    for completion in _completion_chunks():
        assert proto_of(completion, pb.CompletionChunk()) == mapped(completion, pb.CompletionChunk()), (
            completion
        )
