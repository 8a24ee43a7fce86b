"""The HF transformers peer of ``bench serve``: ``bench.serving.hf_server`` in a child process on loopback.

    async with ServePeer.start(PeerSpec(model_dir=..., device="cuda")) as peer:
        metrics = await run_serve(base_url=peer.base_url, model=peer.model, ...)

The child binds a free port itself and reports it on its first stdout line, so there is no race
for the port; its stderr goes to a log file whose tail is in the error when it fails to start.
A separate process, like the server under test, so the client's event loop and the peer's
generation loop never share a GIL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["PeerSpec", "PeerStartError", "ServePeer"]

_REPO = Path(__file__).resolve().parents[2]


class PeerStartError(Exception):
    """The peer server exited or stayed silent before it was ready."""


@dataclass(frozen=True, slots=True)
class PeerSpec:
    model_dir: Path
    """The transformers checkpoint the peer serves (the same weights as the server under test)."""
    device: str = "cpu"
    mode: str = "cb"
    """``cb`` (continuous batching manager) or ``generate`` (sequential)."""
    temperature: float = 1.0
    """Must equal the workload's: the peer samples every request at this temperature."""
    extra_args: tuple[str, ...] = ()
    """More ``bench.serving.hf_server`` options, e.g. ``--num-threads=1``, ``--num-blocks=64``."""
    start_timeout_s: float = 600.0
    """Model load + warm-up (CUDA graph capture) must finish within this."""

    def __post_init__(self) -> None:
        if not (self.model_dir / "config.json").is_file():
            raise ValueError(f"peer model dir {self.model_dir} holds no config.json")
        if self.start_timeout_s <= 0:
            raise ValueError("start_timeout_s must be positive")

    def argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "bench.serving.hf_server",
            f"--model-dir={self.model_dir}",
            f"--device={self.device}",
            f"--mode={self.mode}",
            f"--temperature={self.temperature}",
            *self.extra_args,
        ]


@dataclass
class ServePeer:
    process: asyncio.subprocess.Process
    info: dict[str, Any]
    """The child's ready line: port, model, mode, attention, dtype, transformers version."""
    log_path: Path
    """The child's stderr; removed when the peer stops."""
    argv: list[str] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.info['port']}"

    @property
    def model(self) -> str:
        return str(self.info["model"])

    @classmethod
    @contextlib.asynccontextmanager
    async def start(cls, spec: PeerSpec) -> AsyncIterator[ServePeer]:
        log_dir = Path(tempfile.mkdtemp(prefix="hf-peer-"))
        log_path = log_dir / "stderr.log"
        argv = spec.argv()
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(_REPO), os.environ.get("PYTHONPATH")])),
        }
        with log_path.open("wb") as log:
            process = await asyncio.create_subprocess_exec(
                *argv,
                cwd=_REPO,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
            )
        drain: asyncio.Task[None] | None = None
        try:
            info = await cls._wait_ready(process, log_path, spec.start_timeout_s)
            # Keep reading stdout so a chatty child never blocks on a full pipe.
            drain = asyncio.create_task(cls._drain(process))
            yield cls(process=process, info=info, log_path=log_path, argv=argv)
        finally:
            await cls._stop(process)
            if drain is not None:
                await drain
            shutil.rmtree(log_dir, ignore_errors=True)

    @staticmethod
    async def _drain(process: asyncio.subprocess.Process) -> None:
        if process.stdout is not None:
            while await process.stdout.read(65536):
                pass

    @staticmethod
    async def _wait_ready(
        process: asyncio.subprocess.Process, log_path: Path, timeout_s: float
    ) -> dict[str, Any]:
        if process.stdout is None:
            raise PeerStartError("HF peer started without a stdout pipe")
        try:
            line = await asyncio.wait_for(process.stdout.readline(), timeout_s)
        except TimeoutError:
            tail = _log_tail(log_path)
            raise PeerStartError(f"HF peer not ready after {timeout_s:.0f} s:\n{tail}") from None
        try:
            info = json.loads(line)
        except json.JSONDecodeError:
            info = None
        if not isinstance(info, dict) or "port" not in info:
            await process.wait()
            tail = _log_tail(log_path)
            raise PeerStartError(f"HF peer exited (code {process.returncode}) before it was ready:\n{tail}")
        return info

    @staticmethod
    async def _stop(process: asyncio.subprocess.Process) -> None:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()


def _log_tail(path: Path, num_chars: int = 2000) -> str:
    return path.read_text(errors="replace")[-num_chars:]
