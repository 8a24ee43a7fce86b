"""The committed gRPC modules are exactly what grpc_tools.protoc makes of inference.proto today."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]
PROTO = "gateway/grpc_api/inference.proto"
GENERATED = ("inference_pb2.py", "inference_pb2.pyi", "inference_pb2_grpc.py")


def test_regenerating_from_the_proto_gives_the_committed_files(tmp_path: Path) -> None:
    protoc = pytest.importorskip("grpc_tools.protoc", reason="grpcio-tools (the test extra) regenerates")
    well_known = resources.files("grpc_tools") / "_proto"  # google/protobuf/struct.proto
    args = ["protoc", f"-I{REPO}", f"-I{well_known}", f"--python_out={tmp_path}", f"--pyi_out={tmp_path}"]
    args += [f"--grpc_python_out={tmp_path}", str(REPO / PROTO)]
    assert protoc.main(args) == 0
    for name in GENERATED:
        made = (tmp_path / "gateway" / "grpc_api" / name).read_bytes()
        committed = (REPO / "gateway" / "grpc_api" / name).read_bytes()
        assert made == committed, f"{name} is stale: regenerate it (the command is in {PROTO})"
