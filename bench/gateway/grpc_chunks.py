"""Encoding one streamed chunk for the client: gRPC (field by field, or the protobuf JSON mapping)
beside SSE (msgspec), the per-chunk cost each transport adds to a stream.

Run: ``python -m bench.gateway.grpc_chunks [--n 20000]``; prints microseconds per chunk (median of
5 rounds) and writes ``bench/results/grpc_chunks.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import timeit
from collections.abc import Callable
from pathlib import Path

import msgspec

from bench.provenance import provenance
from gateway.grpc_api import inference_pb2 as pb
from gateway.grpc_api.messages import mapped, proto_of
from gateway.openai_types import ChatChunkChoice, ChatCompletionChunk, ChunkDelta

CHUNK = ChatCompletionChunk(
    id="chatcmpl-0123456789abcdef01234567",
    created=1_760_000_000,
    model="demo-chat",
    system_fingerprint="fp_0123456789ab",
    choices=[ChatChunkChoice(index=0, delta=ChunkDelta(content=" hello"))],
)


def per_chunk_us(encode: Callable[[], bytes], n: int) -> float:
    return statistics.median(timeit.repeat(encode, number=n, repeat=5)) / n * 1e6


def main(n: int) -> None:
    encoder = msgspec.json.Encoder()
    ways: dict[str, Callable[[], bytes]] = {
        "sse (msgspec)": lambda: b"data: " + encoder.encode(CHUNK) + b"\n\n",
        "grpc, field by field (served)": lambda: proto_of(
            CHUNK, pb.ChatCompletionChunk()
        ).SerializeToString(),
        "grpc, json mapping": lambda: mapped(CHUNK, pb.ChatCompletionChunk()).SerializeToString(),
    }
    results = {name: round(per_chunk_us(encode, n), 2) for name, encode in ways.items()}
    for name, us in results.items():
        print(f"{name:32s} {us:8.2f} us/chunk")
    out = Path(__file__).resolve().parents[1] / "results" / "grpc_chunks.json"
    out.write_text(
        json.dumps({**provenance(sys.argv, "cpu"), "n": n, "us_per_chunk": results}, indent=2) + "\n"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=20_000)
    main(parser.parse_args().n)
