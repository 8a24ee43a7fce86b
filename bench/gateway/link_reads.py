"""The gateway's CPU per streamed token in the engine link alone: socket reads in, readers' frames out.

No sockets, no HTTP, no load generator: the engine's bytes are built first with websockets' own
sans-I/O server, then timed as they go through ``EngineLink.data_received`` to one reader task per
stream (process CPU time, so a loaded machine inflates little). Two shapes of traffic:

    behind a real engine: every stream in every step's message, the readers keeping up (a read
        holds one message)
    behind the stub engine under load: a few streams per message, many messages per read (the
        readers fell behind; what ``strongroom bench gateway --stream`` drives)

    python -m bench.gateway.link_reads --repeat 5
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import click
import msgspec
from websockets.server import ServerProtocol

from engine.core.outputs import StreamDelta
from engine.core.sampling_params import SamplingParams
from engine.serving.engine_link import EngineLink, LinkStream
from engine.serving.protocol import GenerateRequest

_SHAPES = {
    "real engine (32 streams a message, 1 message a read)": (32, 32, 1),
    "stub engine behind (3 streams a message, 60 messages a read)": (32, 3, 60),
}
"""name: (streams, streams per message, messages per read)."""


class _Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def abort(self) -> None:
        return None

    def close(self) -> None:
        return None


def _delta(step: int, last: bool) -> StreamDelta:
    return StreamDelta(
        index=0,
        text=" hello",
        token_ids=[1],
        finish_reason="length" if last else None,
        num_prompt_tokens=5,
        num_output_tokens=step + 1,
    )


async def _consume(stream: LinkStream) -> int:
    num_tokens = 0
    async for frame in stream.frames():
        num_tokens += sum(len(event.token_ids) for event in frame)
    return num_tokens


async def _run(num_streams: int, per_message: int, per_read: int, tokens: int) -> tuple[float, int]:
    """CPU seconds and tokens delivered for ``tokens`` steps of every stream."""
    link = EngineLink("http://engine", "t", read_timeout_s=30, max_stream_bytes=1 << 30)
    server = ServerProtocol()
    transport = _Transport()
    link.connection_made(transport)  # type: ignore[arg-type]
    server.receive_data(b"".join(transport.written))
    [handshake] = server.events_received()
    server.send_response(server.accept(handshake))  # type: ignore[arg-type]
    link.data_received(b"".join(server.data_to_send()))
    request = GenerateRequest(
        request_id="r", model="m", prompt="hi", params=SamplingParams(max_tokens=tokens)
    )
    streams = [link.open(request) for _ in range(num_streams)]
    # Every stream gets ``tokens`` entries, ``per_message`` streams to a message, round robin.
    made = [0] * num_streams
    reads: list[bytes] = []
    cursor = 0
    num_messages = 0
    while any(m < tokens for m in made):
        entries: list[list[Any]] = []
        while len(entries) < per_message and any(m < tokens for m in made):
            i = cursor % num_streams
            cursor += 1
            if made[i] < tokens:
                entries.append([streams[i].sid, [_delta(made[i], made[i] == tokens - 1)]])
                made[i] += 1
        server.send_binary(msgspec.msgpack.encode(entries))
        num_messages += 1
        if num_messages % per_read == 0:
            reads.append(b"".join(server.data_to_send()))
    reads.append(b"".join(server.data_to_send()))
    readers = [asyncio.create_task(_consume(stream)) for stream in streams]
    await asyncio.sleep(0)
    started = time.process_time()
    for data in reads:
        link.data_received(data)
        await asyncio.sleep(0)  # the woken readers run
        await asyncio.sleep(0)
    delivered = sum(await asyncio.gather(*readers))
    return time.process_time() - started, delivered


@click.command()
@click.option("--repeat", default=5, show_default=True)
@click.option("--tokens", default=64, show_default=True, help="Tokens per stream.")
@click.option("--output", type=click.Path(path_type=Path), default=None)
def main(repeat: int, tokens: int, output: Path | None) -> None:
    result: dict[str, Any] = {}
    for name, (num_streams, per_message, per_read) in _SHAPES.items():
        per_token = []
        for _ in range(repeat):
            cpu_s, delivered = asyncio.run(_run(num_streams, per_message, per_read, tokens))
            assert delivered == num_streams * tokens, (delivered, num_streams * tokens)
            per_token.append(cpu_s / delivered * 1e6)
        result[name] = {"us_per_token": per_token, "median": statistics.median(per_token)}
        spread = f"{min(per_token):.2f}-{max(per_token):.2f}"
        click.echo(f"{name}: {statistics.median(per_token):.2f} µs/token (median of {repeat}, {spread})")
    if output is not None:
        output.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
