"""Sealed-model load throughput vs plaintext safetensors load, same model, same run.

    python -m bench.keys.load [--size-mb 512] [--device cpu|cuda] [--repeat 5]

Both files are read once first, so both come from the page cache. Methods timed (best of
--repeat, bytes of the safetensors file / seconds):

  cpu  plain_load_file   safetensors.torch.load_file + clone of every tensor (materialized in RAM)
       plain_read_parse  DirectorySource.read (file.read_bytes) + zero-copy tensor views
       sealed            SealedSource.read_into(torch.empty) (parallel decrypt_into, tag digest) + views
       sealed_read_bytearray  SealedSource.read (a fresh bytearray) + zero-copy views
  cuda plain_load_file   safetensors.torch.load_file(device="cuda")
       sealed            SealedSource.read_into(a pinned host buffer) + one H2D copy + views on device
       sealed_alloc      the same, the pinned buffer allocated inside the timing

Ratio = sealed / best plaintext method. Target >= 0.95. Results go to bench/results/keys_load_<device>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from bench.provenance import provenance
from engine.loading.model_source import DirectorySource
from keys import KeyFileProvider, open_model, seal_model

_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "U8": torch.uint8}


def tensors_from_buffer(buf: torch.Tensor) -> dict[str, torch.Tensor]:
    """Parse safetensors from memory without copying: views into ``buf`` (uint8, any device)."""
    # buf: [file_bytes] uint8
    head = bytes(buf[:8].cpu().numpy()) if buf.device.type != "cpu" else bytes(buf[:8].numpy())
    (n,) = struct.unpack("<Q", head)
    header_bytes = buf[8 : 8 + n].cpu().numpy().tobytes()
    header = json.loads(header_bytes)
    base = 8 + n
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        start, end = meta["data_offsets"]
        out[name] = buf[base + start : base + end].view(_DTYPES[meta["dtype"]]).view(meta["shape"])
    return out


def best_seconds(fn: Callable[[], Any], repeat: int, sync: Callable[[], None]) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        sync()
        times.append(time.perf_counter() - start)
        del result
    return times


def build(workdir: Path, size_mb: int) -> tuple[Path, Path, KeyFileProvider]:
    plain = workdir / "plain"
    plain.mkdir()
    per = 16 << 20
    count = max(1, (size_mb << 20) // per)
    gen = torch.Generator().manual_seed(0)
    tensors = {
        f"layers.{i}.weight": torch.randn(per // 2 // 4096, 4096, generator=gen).to(torch.bfloat16)
        for i in range(count)
    }
    save_file(tensors, plain / "model.safetensors")
    (plain / "config.json").write_text('{"architectures": ["Bench"]}')
    provider = KeyFileProvider.create(workdir / "master.key")
    seal_model(plain, workdir / "sealed", "bench", provider)
    for path in [*plain.iterdir(), *(workdir / "sealed").iterdir()]:
        path.read_bytes()  # page cache
    return plain, workdir / "sealed", provider


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mb", type=int, default=512)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default=None)
    parser.add_argument(
        "--workdir", default=None, help="where the test model is written (default: a temp dir)"
    )
    args = parser.parse_args(argv[1:])
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    workdir = Path(tempfile.mkdtemp(prefix="keys_load_", dir=args.workdir))
    try:
        plain, sealed, provider = build(workdir, args.size_mb)
        size = (plain / "model.safetensors").stat().st_size
        name = "model.safetensors"
        source = open_model(sealed, provider, audit=None, process="bench")
        results: dict[str, list[float]] = {}
        if args.device == "cpu":
            sync = lambda: None  # noqa: E731
            results["plain_load_file"] = best_seconds(
                lambda: {k: v.clone() for k, v in load_file(plain / name).items()}, args.repeat, sync
            )
            results["plain_read_parse"] = best_seconds(
                lambda: tensors_from_buffer(torch.frombuffer(bytearray(DirectorySource(plain).read(name)), dtype=torch.uint8)),
                args.repeat, sync,
            )  # fmt: skip

            def sealed_into_torch() -> dict[str, torch.Tensor]:
                host = torch.empty(size, dtype=torch.uint8)
                source.read_into(name, memoryview(host.numpy()))
                return tensors_from_buffer(host)

            results["sealed"] = best_seconds(sealed_into_torch, args.repeat, sync)
            results["sealed_read_bytearray"] = best_seconds(
                lambda: tensors_from_buffer(torch.frombuffer(source.read(name), dtype=torch.uint8)),
                args.repeat,
                sync,
            )
        else:
            sync = torch.cuda.synchronize
            torch.zeros(1, device="cuda")
            results["plain_load_file"] = best_seconds(
                lambda: load_file(plain / name, device="cuda"), args.repeat, sync
            )
            pinned = torch.empty(size, dtype=torch.uint8, pin_memory=True)

            def sealed_to_device(host: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
                host = host if host is not None else torch.empty(size, dtype=torch.uint8, pin_memory=True)
                source.read_into(name, memoryview(host.numpy()))
                return tensors_from_buffer(host.to("cuda", non_blocking=True))

            results["sealed"] = best_seconds(lambda: sealed_to_device(pinned), args.repeat, sync)
            results["sealed_alloc"] = best_seconds(sealed_to_device, args.repeat, sync)
        source.close()
        gbps = {k: size / min(v) / 1e9 for k, v in results.items()}
        plain_best = max(v for k, v in gbps.items() if k.startswith("plain"))
        method = {"cpu": "read_into(torch.empty) + zero-copy views", "cuda": "read_into(pinned) + H2D"}
        report = {
            **provenance(argv, args.device),
            "device": args.device,
            "file_bytes": size,
            "chunk_size": 1 << 20,
            "decrypt_threads": min(32, os.cpu_count() or 1),
            "seconds": results,
            "best_gb_per_s": gbps,
            "sealed_method": method[args.device],
            "ratio_sealed_vs_best_plain": gbps["sealed"] / plain_best,
            "target_ratio": 0.95,
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    for key, value in gbps.items():
        print(f"{key:18s} {value:7.2f} GB/s")
    print(f"sealed / best plaintext = {report['ratio_sealed_vs_best_plain']:.3f} (target >= 0.95)")
    out = Path(args.out or Path(__file__).resolve().parents[1] / "results" / f"keys_load_{args.device}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
