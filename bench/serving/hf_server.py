"""An OpenAI-compatible ``/v1/completions`` over HF transformers: the peer for ``bench serve``.

    python -m bench.serving.hf_server --model-dir DIR [--device cuda] [--mode cb|generate] [--port 0]

It speaks what the benchmark sends (prompt as token ids or text, ``max_tokens``, ``ignore_eos``,
``stream``, ``stream_options.include_usage``, ``temperature`` equal to the server's) and nothing
more; anything else gets a 400 with an OpenAI-style error body. HTTP/1.1 is h11 on asyncio
streams (h11 comes with httpx), so the server runs wherever torch, transformers and httpx do:
the GPU image has no litestar or uvicorn. Once the model is loaded and the socket bound it
prints one JSON line on stdout (``{"port": ..., ...}``), which ``bench.serving.peer`` waits for.

Text deltas are detokenized incrementally (decode a short window, emit what grew, hold back a
trailing U+FFFD), one SSE chunk per step that adds text.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any

import click
import h11

from bench.engine.hf_generator import MODES, GenerationError, HFGenerator, HFPeerConfig, build_generator

__all__ = ["BadRequest", "CompletionRequest", "HFServer", "parse_completion_request"]

MAX_BODY_BYTES = 16 << 20


class BadRequest(Exception):
    """The request is not one this server can run; the message goes to the client."""

    def __init__(self, message: str, *, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    prompt: list[int]
    max_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool

    def __repr__(self) -> str:
        return f"CompletionRequest(prompt_len={len(self.prompt)}, max_tokens={self.max_tokens})"


@dataclass(frozen=True, slots=True)
class ModelLimits:
    name: str
    vocab_size: int
    max_positions: int
    temperature: float


def parse_completion_request(body: Any, limits: ModelLimits, tokenizer: Any) -> CompletionRequest:
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    if body.get("model", limits.name) != limits.name:
        raise BadRequest(f"this server serves {limits.name!r}", status=404, param="model")
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        prompt = tokenizer.encode(prompt, add_special_tokens=False)
    elif isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], list | str):
        raise BadRequest("one prompt per request", param="prompt")
    if not isinstance(prompt, list) or not prompt or not all(type(t) is int for t in prompt):
        raise BadRequest("prompt must be a non-empty string or list of token ids", param="prompt")
    if not all(0 <= t < limits.vocab_size for t in prompt):
        raise BadRequest(f"prompt token ids must be in [0, {limits.vocab_size})", param="prompt")
    max_tokens = body.get("max_tokens", 16)
    if type(max_tokens) is not int or max_tokens < 1:
        raise BadRequest("max_tokens must be an integer >= 1", param="max_tokens")
    if len(prompt) + max_tokens > limits.max_positions:
        raise BadRequest(
            f"prompt ({len(prompt)}) + max_tokens ({max_tokens}) exceeds the model's "
            f"{limits.max_positions} positions",
            param="max_tokens",
        )
    temperature = body.get("temperature")
    if temperature is not None and temperature != limits.temperature:
        raise BadRequest(
            f"this server samples at temperature {limits.temperature}; restart it with --temperature",
            param="temperature",
        )
    if body.get("n", 1) != 1:
        raise BadRequest("n must be 1", param="n")
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise BadRequest("stream_options must be an object", param="stream_options")
    return CompletionRequest(
        prompt=prompt,
        max_tokens=max_tokens,
        ignore_eos=bool(body.get("ignore_eos", False)),
        stream=bool(body.get("stream", False)),
        include_usage=bool(stream_options.get("include_usage", False)),
    )


def error_body(message: str, status: int, param: str | None = None) -> bytes:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return json.dumps({"error": {"message": message, "type": kind, "param": param, "code": status}}).encode()


class IncrementalDetokenizer:
    """Text added by each step, decoding only a window of recent tokens (TGI's method)."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._tokens: list[int] = []
        self._prefix = 0
        self._read = 0

    def push(self, tokens: list[int]) -> str:
        self._tokens.extend(tokens)
        before = self._tokenizer.decode(self._tokens[self._prefix : self._read])
        after = self._tokenizer.decode(self._tokens[self._prefix :])
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""
        self._prefix, self._read = self._read, len(self._tokens)
        return str(after[len(before) :])


class HFServer:
    def __init__(self, generator: HFGenerator, tokenizer: Any, limits: ModelLimits) -> None:
        self._generator = generator
        self._tokenizer = tokenizer
        self._limits = limits

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=64 << 10)
        try:
            while conn.our_state is h11.IDLE or conn.our_state is h11.DONE:
                if conn.our_state is h11.DONE:
                    conn.start_next_cycle()
                event = await self._next_event(conn, reader)
                if not isinstance(event, h11.Request):
                    break
                body = bytearray()
                while isinstance(part := await self._next_event(conn, reader), h11.Data):
                    body += part.data
                    if len(body) > MAX_BODY_BYTES:
                        raise BadRequest("body too large", status=413)
                if not isinstance(part, h11.EndOfMessage):
                    break
                await self._route(conn, writer, event, bytes(body))
                if conn.their_state is not h11.DONE:
                    break
        except BadRequest as exc:
            with contextlib.suppress(h11.LocalProtocolError, ConnectionError):
                await self._send_json(conn, writer, exc.status, error_body(str(exc), exc.status, exc.param))
        except h11.RemoteProtocolError as exc:
            with contextlib.suppress(h11.LocalProtocolError, ConnectionError):
                await self._send_json(conn, writer, 400, error_body(f"bad HTTP: {exc}", 400))
        except ConnectionError:
            pass
        except Exception as exc:  # a bug here: answer 500 if the response has not started, and say why
            print(f"hf-server: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            with contextlib.suppress(h11.LocalProtocolError, ConnectionError):
                await self._send_json(conn, writer, 500, error_body(f"{type(exc).__name__}: {exc}", 500))
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _next_event(self, conn: h11.Connection, reader: asyncio.StreamReader) -> Any:
        while (event := conn.next_event()) is h11.NEED_DATA:
            conn.receive_data(await reader.read(65536))
        return event

    async def _route(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, request: h11.Request, body: bytes
    ) -> None:
        method, target = request.method.decode(), request.target.decode().split("?")[0]
        if target == "/health" and method == "GET":
            await self._send_json(conn, writer, 200, b'{"status":"ok"}')
            return
        if target != "/v1/completions":
            await self._send_json(conn, writer, 404, error_body(f"no route {target}", 404))
            return
        if method != "POST":
            await self._send_json(conn, writer, 405, error_body("use POST", 405))
            return
        try:
            parsed = parse_completion_request(json.loads(body or b"null"), self._limits, self._tokenizer)
        except json.JSONDecodeError as exc:
            raise BadRequest(f"the body is not JSON: {exc}") from exc
        if parsed.stream:
            await self._stream(conn, writer, parsed)
        else:
            await self._complete(conn, writer, parsed)

    async def _complete(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, req: CompletionRequest
    ) -> None:
        tokens: list[int] = []
        try:
            async with contextlib.aclosing(
                self._generator.stream(req.prompt, req.max_tokens, req.ignore_eos)
            ) as steps:
                async for new in steps:
                    tokens += new
        except GenerationError as exc:
            await self._send_json(conn, writer, 500, error_body(str(exc), 500))
            return
        payload = {
            **self._envelope(),
            "object": "text_completion",
            "choices": [
                {
                    "index": 0,
                    "text": self._tokenizer.decode(tokens),
                    "finish_reason": self._finish_reason(req, len(tokens)),
                }
            ],
            "usage": self._usage(req, len(tokens)),
        }
        await self._send_json(conn, writer, 200, json.dumps(payload).encode())

    async def _stream(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, req: CompletionRequest
    ) -> None:
        headers = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]
        await self._send(conn, writer, h11.Response(status_code=200, headers=headers))
        envelope = {**self._envelope(), "object": "text_completion"}
        detokenizer = IncrementalDetokenizer(self._tokenizer)
        num_tokens = 0
        try:
            async with contextlib.aclosing(
                self._generator.stream(req.prompt, req.max_tokens, req.ignore_eos)
            ) as steps:
                async for new in steps:
                    num_tokens += len(new)
                    if text := detokenizer.push(new):
                        choice = {"index": 0, "text": text, "finish_reason": None}
                        await self._event(conn, writer, {**envelope, "choices": [choice]})
        except GenerationError as exc:
            await self._event(conn, writer, {"error": {"message": str(exc), "type": "server_error"}})
        else:
            finish = {"index": 0, "text": "", "finish_reason": self._finish_reason(req, num_tokens)}
            await self._event(conn, writer, {**envelope, "choices": [finish]})
            if req.include_usage:
                await self._event(
                    conn, writer, {**envelope, "choices": [], "usage": self._usage(req, num_tokens)}
                )
        await self._send(conn, writer, h11.Data(data=b"data: [DONE]\n\n"))
        await self._send(conn, writer, h11.EndOfMessage())

    def _envelope(self) -> dict[str, Any]:
        return {
            "id": f"cmpl-{uuid.uuid4().hex[:24]}",
            "created": int(time.time()),
            "model": self._limits.name,
        }

    @staticmethod
    def _finish_reason(req: CompletionRequest, num_tokens: int) -> str:
        return "length" if num_tokens >= req.max_tokens else "stop"

    @staticmethod
    def _usage(req: CompletionRequest, num_tokens: int) -> dict[str, int]:
        return {
            "prompt_tokens": len(req.prompt),
            "completion_tokens": num_tokens,
            "total_tokens": len(req.prompt) + num_tokens,
        }

    async def _event(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, payload: dict[str, Any]
    ) -> None:
        await self._send(conn, writer, h11.Data(data=b"data: " + json.dumps(payload).encode() + b"\n\n"))

    async def _send_json(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, status: int, body: bytes
    ) -> None:
        headers = [("content-type", "application/json"), ("content-length", str(len(body)))]
        response = h11.Response(status_code=status, headers=headers, reason=HTTPStatus(status).phrase)
        await self._send(conn, writer, response)
        await self._send(conn, writer, h11.Data(data=body))
        await self._send(conn, writer, h11.EndOfMessage())

    @staticmethod
    async def _send(conn: h11.Connection, writer: asyncio.StreamWriter, event: Any) -> None:
        if data := conn.send(event):
            writer.write(data)
            await writer.drain()


def limits_of(model_dir: Path, name: str, temperature: float) -> ModelLimits:
    config = json.loads((model_dir / "config.json").read_text())
    text = config.get("text_config", config)
    return ModelLimits(
        name=name,
        vocab_size=int(text["vocab_size"]),
        max_positions=int(text.get("max_position_embeddings", 1 << 30)),
        temperature=temperature,
    )


async def serve_forever(config: HFPeerConfig, name: str, host: str, port: int) -> None:
    import transformers
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(config.model_dir)
    generator = build_generator(config)
    server = HFServer(generator, tokenizer, limits_of(config.model_dir, name, config.temperature))
    tcp = await asyncio.start_server(server.handle, host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    ready = {
        "port": tcp.sockets[0].getsockname()[1],
        "model": name,
        **generator.info,
        "device": config.device,
        "temperature": config.temperature,
        "num_threads": config.num_threads,
        "transformers": transformers.__version__,
    }
    print(json.dumps(ready), flush=True)
    try:
        async with tcp:
            await stop.wait()
    finally:
        generator.close()


@click.command("hf-server")
@click.option("--model-dir", type=click.Path(path_type=Path, file_okay=False, exists=True), required=True)
@click.option("--served-model-name", default=None, help="Model name clients send; default: the dir name.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=0, show_default=True, help="0: any free port (printed).")
@click.option("--device", default="cpu", show_default=True)
@click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float16"]), default=None)
@click.option("--mode", type=click.Choice(MODES), default="cb", show_default=True)
@click.option("--attn-implementation", default="sdpa", show_default=True)
@click.option("--temperature", type=float, default=1.0, show_default=True)
@click.option("--num-threads", type=int, default=None, help="torch intra-op threads.")
@click.option("--num-blocks", type=int, default=None, help="cb: KV cache blocks (default: from memory).")
@click.option("--max-batch-tokens", type=int, default=None, help="cb: tokens per step.")
@click.option("--warmup/--no-warmup", default=True, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
def main(
    model_dir: Path,
    served_model_name: str | None,
    host: str,
    port: int,
    **peer: Any,
) -> None:
    """Serve a transformers checkpoint at /v1/completions (streaming), for bench serve's peer."""
    try:
        config = HFPeerConfig(model_dir=model_dir, **peer)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    name = served_model_name or model_dir.name
    click.echo(f"hf-server: {json.dumps({**asdict(config), 'model_dir': str(model_dir)})}", err=True)
    asyncio.run(serve_forever(config, name, host, port))
    sys.exit(0)


if __name__ == "__main__":
    main()
